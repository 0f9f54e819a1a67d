"""A keyed request cut by a kill -9 after its work was stored and before its key's outcome
was, on PostgreSQL: a trigger holds the outcome's ``UPDATE`` until the server is killed.

`cut_by_kill_9` sends the request, waits until its outcome is held, kills the server (no
shutdown hook runs), ends the held database session and drops the trigger; `retry` sends the
request again until the key is taken over (409 with ``Retry-After`` while the first attempt
may still be running elsewhere, ``TAKEOVER_AFTER`` seconds).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
from tests.support.pg_schema import fetch_rows

from mail.server.idempotency import TAKEOVER_AFTER
from server_fixtures import ServerProcess

HOLD_OUTCOMES = """
CREATE FUNCTION hold_outcome() RETURNS trigger AS $$
BEGIN
    IF NEW.status IS NOT NULL THEN PERFORM pg_sleep(120); END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER hold_outcome BEFORE UPDATE ON idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION hold_outcome();
"""

# The server's held outcome (not the query looking for it, whose text names it too).
HELD = (
    "FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
    "AND query LIKE '%UPDATE idempotency_keys SET status%'"
)


def execute(url: str, sql: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def rows(url: str, sql: str) -> list[dict[str, Any]]:
    return [dict(row) for row in asyncio.run(fetch_rows(url, sql))]


def cut_by_kill_9(
    server: ServerProcess,
    url: str,
    method: str,
    path: str,
    body: Any,
    headers: dict[str, str],
    settled: Callable[[], bool] | None = None,
) -> None:
    """Send the request; kill -9 the server once its work is done and its outcome held (and,
    with `settled`, once it says so too: what the work set off is committed)."""
    execute(url, HOLD_OUTCOMES)
    answers: list[Any] = []

    def first_attempt() -> None:
        try:
            answers.append(
                httpx.request(
                    method, f"{server.base_url}{path}", json=body, headers=headers, timeout=60
                )
            )
        except httpx.HTTPError as exc:
            answers.append(exc)

    first = threading.Thread(target=first_attempt)
    first.start()
    deadline = time.monotonic() + 60
    while not rows(url, f"SELECT count(*) AS n {HELD}")[0]["n"]:
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.05)
    while settled is not None and not settled():
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.05)
    assert server.proc is not None
    server.proc.kill()  # kill -9: the outcome is never written
    server.proc.wait(10)
    first.join(30)
    assert answers and isinstance(answers[0], httpx.HTTPError), answers  # no answer came
    # Its database session sleeps on: ended, so that the trigger can be dropped.
    rows(url, f"SELECT pg_terminate_backend(pid) AS ended {HELD}")
    execute(url, "DROP TRIGGER hold_outcome ON idempotency_keys")


def retry(
    server: ServerProcess, method: str, path: str, body: Any, headers: dict[str, str]
) -> httpx.Response:
    """The request again, as a client does while told to wait, until it gets its outcome."""
    deadline = time.monotonic() + TAKEOVER_AFTER + 60
    while True:
        answer = httpx.request(
            method, f"{server.base_url}{path}", json=body, headers=headers, timeout=60
        )
        if answer.status_code != 409:
            return answer
        assert time.monotonic() < deadline, answer.text
        time.sleep(float(answer.headers["retry-after"]))
