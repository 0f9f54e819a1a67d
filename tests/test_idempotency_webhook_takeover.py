"""A keyed ``POST /webhooks`` (or rotate-secret) whose server dies after the change was stored
and before the key's outcome was: its retry gets that change, not a second one.

The key is taken (committed) before the route runs, the subscription is stored, then the
outcome. A kill -9 between the last two leaves the key unfinished; once
`TAKEOVER_AFTER` has passed the retry takes the key over and ran the route again: a second
subscription, and the first one's secret (in the answer the client never got) lost for good,
though it stays subscribed and receives deliveries. A rotation ran twice: the secret the
first attempt made (lost with its answer) became the "previous" one, the caller's original
secret stopped signing at once instead of after the overlap. The routes now name their work
when the key is taken (the subscription id, the new secret; kept with the key), and a
takeover finds it.

Deterministic on PostgreSQL: a trigger holds the outcome's UPDATE until the server is killed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from tests.support.pg_schema import BASE_URL, fetch_rows, scratch_schema, with_search_path

from mail.server.idempotency import TAKEOVER_AFTER
from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(300)

WEBHOOKS = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'

HOLD_OUTCOMES = """
CREATE FUNCTION hold_outcome() RETURNS trigger AS $$
BEGIN
    IF NEW.status IS NOT NULL THEN PERFORM pg_sleep(120); END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER hold_outcome BEFORE UPDATE ON idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION hold_outcome();
"""


def _execute(url: str, sql: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def _start(directory: Path, env: dict[str, str]) -> ServerProcess:
    port = free_port()
    config = write_config(directory, port=port, extra=WEBHOOKS)
    return ServerProcess(directory, port, args=["--config", str(config)], env=env).start()


# The server's held outcome (not this query, whose text names it too).
HELD = (
    "FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
    "AND query LIKE '%UPDATE idempotency_keys SET status%'"
)


def _outcome_held(url: str) -> bool:
    return bool(asyncio.run(fetch_rows(url, f"SELECT count(*) AS n {HELD}"))[0]["n"])


def _retry(server: ServerProcess, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    """The retry: told to wait while the first attempt may still run elsewhere, then its
    outcome."""
    deadline = time.monotonic() + TAKEOVER_AFTER + 60
    while True:
        retry = httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=60)
        if retry.status_code != 409:
            return retry
        assert time.monotonic() < deadline
        time.sleep(float(retry.headers["retry-after"]))


@pytest.mark.parametrize("route", ["create", "rotate-secret"])
def test_a_webhook_change_cut_by_a_kill_9_is_not_made_twice(tmp_path: Path, route: str) -> None:
    write_stub_swarms(tmp_path)
    key = create_key(tmp_path / "registries" / "keys.json", "user", "wanda")
    headers = {**auth(key), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    spec = {"url": "http://127.0.0.1:9/hook", "events": ["*"]}
    with scratch_schema("mail_idem_wh_takeover", BASE_URL) as schema:
        url = with_search_path(BASE_URL, schema)
        env = {"DATABASE_URL": url}
        server = _start(tmp_path, env)
        try:
            path, body, original = "/webhooks", spec, None
            if route == "rotate-secret":
                made = httpx.post(
                    f"{server.base_url}/webhooks", json=spec, headers=auth(key), timeout=60
                ).json()
                path, body, original = f"/webhooks/{made['id']}/rotate-secret", {}, made["secret"]
            _execute(url, HOLD_OUTCOMES)
            answers: list[Any] = []

            def first_attempt() -> None:
                try:
                    answers.append(
                        httpx.post(
                            f"{server.base_url}{path}", json=body, headers=headers, timeout=60
                        )
                    )
                except httpx.HTTPError as exc:
                    answers.append(exc)

            first = threading.Thread(target=first_attempt)
            first.start()
            deadline = time.monotonic() + 60
            while not _outcome_held(url):  # the change stored, its key's outcome held
                assert time.monotonic() < deadline, server.logs()
                time.sleep(0.05)
            assert server.proc is not None
            server.proc.kill()  # kill -9: the outcome is never written
            server.proc.wait(10)
            first.join(30)
            assert answers and isinstance(answers[0], httpx.HTTPError), answers
            # Its database session sleeps on: ended, so that the trigger can be dropped.
            asyncio.run(fetch_rows(url, f"SELECT pg_terminate_backend(pid) {HELD}"))
            _execute(url, "DROP TRIGGER hold_outcome ON idempotency_keys")
            server = _start(tmp_path, env)
            query = "SELECT subscription_id, secret, previous_secret FROM webhook_subscriptions"
            stored = asyncio.run(fetch_rows(url, query))
            assert len(stored) == 1
            if original is not None:  # rotated once by the first attempt
                assert stored[0]["previous_secret"] == original
            retry = _retry(server, path, body, headers)
            assert retry.status_code < 300, retry.text
            after = asyncio.run(fetch_rows(url, query))
            assert [dict(row) for row in after] == [dict(row) for row in stored]
            answer = json.loads(retry.content)
            assert (answer["id"], answer["secret"]) == (
                stored[0]["subscription_id"],
                stored[0]["secret"],
            )
            again = httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=60)
            assert again.content == retry.content
            assert again.headers.get("idempotent-replayed") == "true"
        finally:
            server.stop()
