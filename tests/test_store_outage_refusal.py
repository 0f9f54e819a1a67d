"""A real `mail server` on PostgreSQL whose database goes away: once the task store holds
`[server.store] max_pending_writes` unwritten writes, a new task is refused with 503 and
`Retry-After` (naming the setting) instead of waiting in memory; every task the server
answered 200 for is stored once the database is back, and new tasks are taken again.

The outage is real: the server reaches PostgreSQL through a TCP proxy that the test stops
(connection refused) and starts again on the same port.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from tests.support.outage_server import ThreadedProxy, server_behind_proxy
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import ServerProcess, auth, get_task

pytestmark = pytest.mark.timeout(240)

MAX_PENDING_WRITES = 30


@pytest.fixture
def database() -> Iterator[str]:
    with scratch_schema("mail_refusal", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


def test_new_tasks_are_refused_with_503_while_the_store_is_backed_up(
    database: str, tmp_path: Path
) -> None:
    extra = f"\n[server.store]\nmax_pending_writes = {MAX_PENDING_WRITES}\n"
    with server_behind_proxy(tmp_path, database, "refuse", extra=extra) as outage:
        answered = _answered_through_an_outage(outage.url, outage.key, outage.proxy)
    logs = outage.server.logs()
    assert "refusing new tasks (503)" in logs, logs[-3000:]

    # Stored, after a restart too: read back from the database by a new server.
    restarted = ServerProcess(
        tmp_path,
        outage.server.port,
        args=["--config", str(outage.config)],
        env={"DATABASE_URL": database},
    )
    restarted.start()
    try:
        for response in answered:
            record = get_task(restarted.base_url, outage.key, response.json()["task_id"])
            assert record.status_code == 200, record.text
            events = [e["event"] for e in record.json()["events"]]
            assert "task_complete" in events, events
    finally:
        assert restarted.stop() == 0, restarted.logs()[-3000:]


def _answered_through_an_outage(base: str, key: str, proxy: ThreadedProxy) -> list[httpx.Response]:
    """New tasks while the database is away, until one is refused (checked here); the
    database back, every task answered is stored: the 200 answers."""
    url = f"{base}/message"

    def post(i: int) -> httpx.Response:
        return httpx.post(url, json={"body": f"note {i}"}, headers=auth(key), timeout=180)

    pool = ThreadPoolExecutor(8)
    waiting: list[Future[httpx.Response]] = []
    answered: list[httpx.Response] = []
    refused: httpx.Response | None = None
    try:
        assert post(0).status_code == 200
        proxy.stop()  # PostgreSQL unreachable from here on
        for i in range(1, 200):
            future = pool.submit(post, i)
            try:
                # An answer at once (200 while the queue has room, 503 once it is full), or
                # no answer: a task admitted just before the bound, whose agents now wait
                # for the database.
                response = future.result(timeout=5)
            except TimeoutError:
                waiting.append(future)
                if len(waiting) > 4:  # (a few, at most: then new tasks are refused)
                    break
                continue
            if response.status_code == 503:
                refused = response
                break
            assert response.status_code == 200, response.text
            answered.append(response)
        assert refused is not None, (
            f"no refusal in the outage: {len(answered)} tasks answered, {len(waiting)} waiting"
        )
        assert refused.headers.get("Retry-After") == "5", refused.headers
        detail = refused.json()["detail"]
        assert "max_pending_writes" in detail and f"{MAX_PENDING_WRITES} writes" in detail, detail
        status = httpx.get(f"{base}/status", headers=auth(key), timeout=30).json()
        assert status["storage"]["status"] == "degraded", status
        assert status["storage"]["pending_writes"] <= MAX_PENDING_WRITES, status

        proxy.start()  # the database is back
        answered += [f.result(timeout=120) for f in waiting]
        assert all(r.status_code == 200 for r in answered), [r.text for r in answered]
        deadline = time.monotonic() + 60
        while httpx.get(f"{base}/health", timeout=30).json()["status"] != "healthy":
            assert time.monotonic() < deadline, "the server did not recover"
            time.sleep(0.2)
        again = post(999)
        assert again.status_code == 200, again.text
        answered.append(again)
        for response in answered:
            record = get_task(base, key, response.json()["task_id"])
            assert record.status_code == 200, record.text
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return answered
