"""Team messaging and agent memory writes outlive a database outage (real PostgreSQL behind a
TCP proxy the test cuts): callers go on, the store says it is degraded and why, and every
write lands, in order, once the database is back. Attachments are refused meanwhile rather
than held in memory. (The SQLite side, with a real full disk: test_store_full_disk.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.support.pg_schema import scratch_schema, with_search_path
from tests.support.tcp_proxy import TcpProxy, via_proxy

from mail.store import InstanceKey, StoreUnavailableError
from mail.store.team_base import PostgresTeamStore

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
KEY = InstanceKey("swarm", "user", "alice")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pg_schema() -> Iterator[str]:
    with scratch_schema("mail_retry", BASE_URL) as schema:
        yield schema


@contextlib.asynccontextmanager
async def proxied(pg_schema: str) -> AsyncIterator[tuple[TcpProxy, str]]:
    target = urlsplit(BASE_URL)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
    await proxy.start()
    try:
        yield proxy, via_proxy(with_search_path(BASE_URL, pg_schema), proxy.port)
    finally:
        with contextlib.suppress(Exception):
            await proxy.stop()


async def until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def entry(i: int) -> dict[str, Any]:
    return {
        "entry_id": f"e{i:03d}",
        "agent": "lead",
        "kind": "direct",
        "thread_id": None,
        "sender": "user:alice",
        "subject": "",
        "body": f"note {i}",
        "task_id": "t1",
        "timestamp": f"2025-01-01T00:00:{i:02d}+00:00",
        "read": False,
        "shown": False,
        "attachments": [],
    }


async def test_team_writes_wait_out_an_outage_and_land_in_order(pg_schema: str) -> None:
    async with proxied(pg_schema) as (proxy, url):
        store = PostgresTeamStore(url)
        await store.start()
        try:
            await store.add_inbox_entries(KEY, [entry(0)])
            assert store.status()["degraded"] is False

            await proxy.stop()
            started = time.monotonic()
            for i in range(1, 21):
                await store.add_inbox_entries(KEY, [entry(i)])
            await store.mark(KEY, "lead", ["e001"], field="read")
            assert time.monotonic() - started < 10  # the callers went on
            status = store.status()
            assert status["degraded"] is True and status["last_error"], status
            assert status["pending_writes"] >= 20, status
            with pytest.raises(StoreUnavailableError, match="nothing was stored"):
                await store.put_attachment(KEY, {"attachment_id": "a1"}, b"bytes")

            await proxy.start()
            await until(lambda: store.status()["pending_writes"] == 0)
            assert store.status()["degraded"] is False
            inbox = await store.inbox(KEY, "lead", oldest_first=True)
            assert [e["entry_id"] for e in inbox] == [f"e{i:03d}" for i in range(21)]
            assert [e["entry_id"] for e in inbox if e["read"]] == ["e001"]
        finally:
            await store.close()


async def test_agent_memory_puts_wait_out_an_outage(pg_schema: str) -> None:
    from mail.store.agent_memory import create_agent_memory

    async with proxied(pg_schema) as (proxy, url):
        memory = await create_agent_memory(url)
        try:
            await memory.put("lead", "before", {"content": "remembered before"})
            await proxy.stop()
            await memory.put("lead", "during", {"content": "remembered during the outage"})
            status = memory.status()  # type: ignore[attr-defined]
            assert status["degraded"] is True and status["pending_writes"] >= 1, status

            await proxy.start()
            await until(lambda: memory.status()["pending_writes"] == 0)  # type: ignore[attr-defined]
            found = await memory.search("lead", "outage")
            assert [item["key"] for item in found] == ["during"]
        finally:
            await memory.close()
