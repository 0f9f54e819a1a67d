"""TaskStore contract (memory and PostgreSQL), the write-behind buffer, and outage handling.

PostgreSQL tests use the real server (MAIL_TEST_DATABASE_URL, default
postgresql://postgres@127.0.0.1:5432/test) in a schema of their own that is dropped at the
end. With MAIL_REQUIRE_POSTGRES=1 an unreachable database fails the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import asyncpg
import pytest
from tests.support.pg_schema import scratch_schema, with_search_path
from tests.support.tcp_proxy import TcpProxy, via_proxy

from mail.store import InstanceKey, MemoryTaskStore, create_store
from mail.store.postgres import PostgresTaskStore, is_transient_error
from mail.store.writer import WriteBehindBuffer

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
FAST = {"min_size": 1, "max_size": 3, "batch_delay": 0.005, "retry_initial": 0.05, "retry_max": 0.3}


@pytest.fixture(scope="module")
def pg_schema() -> Iterator[str]:
    """A fresh schema for this module; dropped afterwards."""
    with scratch_schema("mail_test", BASE_URL) as schema:
        yield schema


@pytest.fixture
def pg_url(pg_schema: str) -> str:
    return with_search_path(BASE_URL, pg_schema)


@contextlib.asynccontextmanager
async def direct(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection for checking what really is in the tables."""
    conn = await asyncpg.connect(pg_url, timeout=5)
    try:
        yield conn
    finally:
        await conn.close()


def new_key(role: str = "user") -> InstanceKey:
    return InstanceKey(f"swarm-{uuid.uuid4().hex[:8]}", role, f"id-{uuid.uuid4().hex[:8]}")


TASK = {
    "task_id": "t-1",
    "task_owner": "user:u1@demo",
    "task_contributors": ["user:u1@demo", "agent:a@other"],
    "remote_swarms": ["other"],
    "is_running": True,
    "completed": False,
    "title": "Weather in Paris",
    "start_time": "2025-03-01T10:20:30.123456+00:00",
}


def test_create_store_selects_the_backend() -> None:
    assert isinstance(create_store(None), MemoryTaskStore)
    assert isinstance(create_store("none"), MemoryTaskStore)
    assert isinstance(create_store(""), MemoryTaskStore)
    pg = create_store("postgresql+asyncpg://u@127.0.0.1:1/db", min_size=1)
    assert isinstance(pg, PostgresTaskStore)


# -- PostgreSQL specifics ---------------------------------------------------------------------


async def test_rows_land_in_the_documented_tables(pg_url: str) -> None:
    key = new_key("swarm")
    async with PostgresTaskStore(pg_url, **FAST) as store:
        await store.upsert_task(key, TASK)
        await store.append_event(
            key, "t-1", {"event": "task_complete", "data": {"ok": True}, "id": "9"}
        )
        await store.save_history(key, "t-1", "sup", None, [{"type": "message", "content": "x"}])
        await store.save_history(key, "t-1", "sup", None, [{"type": "message", "content": "y"}])
        await store.save_response(key, "t-1", {"message": {"body": "fin"}})
        assert await store.flush(timeout=10)
    args = (key.swarm_name, key.caller_role, key.caller_id)
    async with direct(pg_url) as conn:
        task = await conn.fetchrow(
            "SELECT * FROM tasks WHERE swarm_name=$1 AND caller_role=$2 AND caller_id=$3", *args
        )
        assert task["task_owner"] == TASK["task_owner"] and task["is_running"] is True
        assert json.loads(task["task_contributors"]) == TASK["task_contributors"]
        event = await conn.fetchrow("SELECT * FROM task_events WHERE swarm_name=$1", key.swarm_name)
        assert (event["event_type"], event["event_data"], event["event_id"]) == (
            "task_complete",
            '{"ok":true}',
            "9",
        )
        histories = await conn.fetch(
            "SELECT tool_format, history FROM agent_histories WHERE swarm_name=$1", key.swarm_name
        )
        assert len(histories) == 1  # replaced, not appended
        assert histories[0]["tool_format"] == "responses"
        assert json.loads(histories[0]["history"]) == [{"type": "message", "content": "y"}]
        response = await conn.fetchval(
            "SELECT response FROM task_responses WHERE swarm_name=$1", key.swarm_name
        )
        assert json.loads(response) == {"message": {"body": "fin"}}


async def test_many_writes_keep_their_order_across_batches(pg_url: str) -> None:
    key = new_key()
    store = PostgresTaskStore(pg_url, **{**FAST, "max_batch": 25})
    await store.start()
    try:
        for i in range(300):
            await store.append_event(key, "t", {"event": "e", "data": str(i), "id": str(i)})
        assert await store.flush(timeout=20)
        assert store.pending_writes == 0
        events = (await store.load_instance(key)).events["t"]
        assert [e["id"] for e in events] == [str(i) for i in range(300)]
    finally:
        await store.close()


async def test_flush_makes_writes_visible_to_other_connections(pg_url: str) -> None:
    key = new_key()
    store = PostgresTaskStore(pg_url, **{**FAST, "batch_delay": 30})
    await store.start()
    try:
        assert await store.flush(timeout=1)  # nothing pending: immediate
        await store.save_response(key, "t", {"body": "visible"})
        assert store.pending_writes == 1  # acknowledged, still queued (long batch delay)
        started = time.monotonic()
        assert await store.flush(timeout=10)
        assert time.monotonic() - started < 10  # flush cuts the batching delay (30 s) short
        async with direct(pg_url) as conn:
            value = await conn.fetchval(
                "SELECT response FROM task_responses WHERE swarm_name=$1", key.swarm_name
            )
        assert json.loads(value) == {"body": "visible"}
    finally:
        await store.close()


async def test_nul_characters_do_not_lose_a_history(pg_url: str) -> None:
    key = new_key()
    async with PostgresTaskStore(pg_url, **FAST) as store:
        await store.save_history(key, "t", "a", None, [{"role": "assistant", "content": "a\x00b"}])
        snap = await store.load_instance(key)
        assert snap.histories[("t", "a")] == [{"role": "assistant", "content": "a\ufffdb"}]
        assert store.status()["dropped_writes"] == 0


async def test_start_fails_clearly_when_the_database_is_unreachable() -> None:
    from mail.store import StoreUnavailableError

    store = PostgresTaskStore(
        "postgresql://postgres@127.0.0.1:1/test", min_size=1, connect_timeout=2
    )
    with pytest.raises(StoreUnavailableError, match="127.0.0.1:1"):
        await store.start()


# -- outage: a TCP proxy we can stop ----------------------------------------------------------


async def wait_until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_outage_is_retried_reported_and_written_after_recovery(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mail.store")
    target = urlsplit(BASE_URL)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
    await proxy.start()
    proxied = via_proxy(pg_url, proxy.port)
    key = new_key()
    store = PostgresTaskStore(proxied, **{**FAST, "connect_timeout": 2})
    await store.start()
    try:
        await store.upsert_task(key, TASK)
        assert await store.flush(timeout=10)

        await proxy.stop()  # the database stops accepting connections
        started = time.monotonic()
        for i in range(20):
            await store.append_event(
                key, "t-1", {"event": "new_message", "data": str(i), "id": str(i)}
            )
        await store.save_history(
            key, "t-1", "sup", None, [{"role": "user", "content": "during outage"}]
        )
        await store.upsert_task(key, {"task_id": "t-1", "is_running": False, "completed": True})
        assert time.monotonic() - started < 0.5  # callers are not held up by the outage

        await wait_until(lambda: store.failed_attempts >= 2)
        assert store.pending_writes == 22
        assert store.is_degraded() and store.status()["degraded"] is True
        assert store.last_error and store.status()["last_error"] == store.last_error
        assert await store.flush(timeout=0.3) is False

        await proxy.start()  # back on the same port
        assert await store.flush(timeout=15)
        assert store.pending_writes == 0 and not store.is_degraded()

        snap = await store.load_instance(key)
        assert [e["id"] for e in snap.events["t-1"]] == [str(i) for i in range(20)]
        assert snap.histories[("t-1", "sup")] == [{"role": "user", "content": "during outage"}]
        assert snap.tasks["t-1"]["completed"] is True
        messages = [r.getMessage() for r in caplog.records]
        assert any("database write failed" in m for m in messages)
        assert any("recovered" in m for m in messages)
    finally:
        await store.close()
        with contextlib.suppress(Exception):
            await proxy.stop()


async def test_close_during_an_outage_is_bounded_and_reports_lost_writes(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = urlsplit(BASE_URL)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
    await proxy.start()
    proxied = via_proxy(pg_url, proxy.port)
    store = PostgresTaskStore(proxied, **{**FAST, "close_timeout": 0.5})
    await store.start()
    await proxy.stop()
    await store.save_response(new_key(), "t", {"body": "lost"})
    started = time.monotonic()
    await store.close()
    assert time.monotonic() - started < 3
    assert any("unwritten" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


# -- the write-behind buffer on its own -------------------------------------------------------


async def test_buffer_batches_in_order_and_respects_max_batch() -> None:
    batches: list[list[int]] = []

    async def apply(batch):  # type: ignore[no-untyped-def]
        batches.append(list(batch))

    buffer: WriteBehindBuffer[int] = WriteBehindBuffer(
        apply, is_transient=lambda e: True, max_batch=10, max_delay=0.01
    )
    buffer.start()
    for i in range(95):
        await buffer.submit(i)
    assert await buffer.flush(timeout=5)
    assert [i for b in batches for i in b] == list(range(95))
    assert max(len(b) for b in batches) <= 10 and len(batches) >= 10
    assert await buffer.close() == 0


async def test_buffer_retries_transient_errors_without_losing_items() -> None:
    failures = 3
    written: list[str] = []

    async def apply(batch):  # type: ignore[no-untyped-def]
        nonlocal failures
        if failures:
            failures -= 1
            raise ConnectionRefusedError("refused")
        written.extend(batch)

    buffer: WriteBehindBuffer[str] = WriteBehindBuffer(
        apply, is_transient=is_transient_error, max_delay=0, retry_initial=0.01, retry_max=0.02
    )
    buffer.start()
    await buffer.submit("a")
    await buffer.submit("b")
    assert await buffer.flush(timeout=5)
    assert written == ["a", "b"]
    assert buffer.failed_attempts == 3 and "refused" in (buffer.last_error or "")
    assert buffer.outage_since is None
    await buffer.close()


async def test_buffer_drops_only_the_item_the_database_rejects() -> None:
    written: list[str] = []

    async def apply(batch):  # type: ignore[no-untyped-def]
        if "poison" in batch:
            raise ValueError("rejected")
        written.extend(batch)

    buffer: WriteBehindBuffer[str] = WriteBehindBuffer(
        apply, is_transient=is_transient_error, max_delay=0.05
    )
    buffer.start()
    for item in ("a", "poison", "b"):
        await buffer.submit(item)
    assert await buffer.flush(timeout=5)
    assert written == ["a", "b"] and buffer.dropped == 1 and buffer.failed_attempts == 0
    await buffer.close()


async def test_buffer_applies_backpressure_at_max_pending() -> None:
    release = asyncio.Event()

    async def apply(batch):  # type: ignore[no-untyped-def]
        await release.wait()

    buffer: WriteBehindBuffer[int] = WriteBehindBuffer(
        apply, is_transient=lambda e: True, max_batch=2, max_delay=0, max_pending=3
    )
    buffer.start()
    for i in range(3):
        await buffer.submit(i)
    blocked = asyncio.create_task(buffer.submit(3))
    await asyncio.sleep(0.05)
    assert not blocked.done()
    release.set()
    await asyncio.wait_for(blocked, 2)
    assert await buffer.flush(timeout=2) and buffer.pending == 0
    await buffer.close()


def test_transient_error_classification() -> None:
    assert is_transient_error(ConnectionResetError())
    assert is_transient_error(TimeoutError())
    assert is_transient_error(asyncpg.exceptions.ConnectionDoesNotExistError("gone"))
    assert is_transient_error(asyncpg.exceptions.CannotConnectNowError("starting"))
    assert not is_transient_error(asyncpg.exceptions.UniqueViolationError("dup"))
    assert not is_transient_error(ValueError("bad"))
