"""A real `mail server` on PostgreSQL whose database goes away: once the task store holds
`[server.store] max_pending_writes` unwritten writes, a new task is refused with 503 and
`Retry-After` (naming the setting) instead of waiting in memory; every task the server
answered 200 for is stored once the database is back, and new tasks are taken again.

The outage is real: the server reaches PostgreSQL through a TCP proxy that the test stops
(connection refused) and starts again on the same port.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path
from tests.support.stub_agents import stub_swarms_json
from tests.support.tcp_proxy import TcpProxy, via_proxy

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(240)

MAX_PENDING_WRITES = 30


class ThreadedProxy:
    """`TcpProxy` on an event loop of its own thread (the test itself is synchronous)."""

    def __init__(self, url: str) -> None:
        target = urlsplit(url)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
        self.up = False

    def _run(self, coro: Any) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def start(self) -> None:
        self._run(self.proxy.start())
        self.up = True

    def stop(self) -> None:
        self._run(self.proxy.stop())
        self.up = False

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def database() -> Iterator[str]:
    with scratch_schema("mail_refusal", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


def test_new_tasks_are_refused_with_503_while_the_store_is_backed_up(
    database: str, tmp_path: Path
) -> None:
    swarm = f"refuse-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(stub_swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    proxy = ThreadedProxy(database)
    proxy.start()
    port = free_port()
    extra = f"\n[server.store]\nmax_pending_writes = {MAX_PENDING_WRITES}\n"
    config = write_config(tmp_path, port=port, swarm=swarm, extra=extra)
    server = ServerProcess(
        tmp_path,
        port,
        args=["--config", str(config)],
        env={"DATABASE_URL": via_proxy(database, proxy.proxy.port)},
    )
    url = f"http://127.0.0.1:{port}/message"

    def post(i: int) -> httpx.Response:
        return httpx.post(url, json={"body": f"note {i}"}, headers=auth(key), timeout=180)

    server.start()
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
        status = httpx.get(f"http://127.0.0.1:{port}/status", headers=auth(key), timeout=30).json()
        assert status["storage"]["status"] == "degraded", status
        assert status["storage"]["pending_writes"] <= MAX_PENDING_WRITES, status

        proxy.start()  # the database is back
        answered += [f.result(timeout=120) for f in waiting]
        assert all(r.status_code == 200 for r in answered), [r.text for r in answered]
        deadline = time.monotonic() + 60
        while (
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).json()["status"] != "healthy"
        ):
            assert time.monotonic() < deadline, "the server did not recover"
            time.sleep(0.2)
        again = post(999)
        assert again.status_code == 200, again.text
        answered.append(again)
        for response in answered:
            task_id = response.json()["task_id"]
            record = httpx.get(
                f"http://127.0.0.1:{port}/task",
                params={"task_id": task_id},
                headers=auth(key),
                timeout=30,
            )
            assert record.status_code == 200, record.text
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if not proxy.up:
            proxy.start()  # a failure above left the database away: let the server stop
        assert server.stop() == 0, server.logs()[-3000:]
        proxy.stop()
        proxy.close()
    logs = server.logs()
    assert "refusing new tasks (503)" in logs, logs[-3000:]

    # Stored, after a restart too: read back from the database by a new server.
    restarted = ServerProcess(
        tmp_path,
        port,
        args=["--config", str(config)],
        env={"DATABASE_URL": database},
    )
    restarted.start()
    try:
        for response in answered:
            record = httpx.get(
                f"http://127.0.0.1:{port}/task",
                params={"task_id": response.json()["task_id"]},
                headers=auth(key),
                timeout=30,
            )
            assert record.status_code == 200, record.text
            events = [e["event"] for e in record.json()["events"]]
            assert "task_complete" in events, events
    finally:
        assert restarted.stop() == 0, restarted.logs()[-3000:]
