"""IdempotencyStore contract, for the memory, SQLite and PostgreSQL stores alike: a key is
taken once, a live record is never overwritten (unless an unfinished one is taken over by the
same request), outcomes are kept, records expire, callers are apart, and what SQLite and
PostgreSQL keep is still there after the store is closed and opened again."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.old_sqlite import write_schema
from tests.support.pg_schema import scratch_schema, with_search_path

from mail.store.base import InstanceKey
from mail.store.idempotency import IdempotencyStore, KeyRecord, MemoryIdempotencyStore

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
ALICE = InstanceKey("s", "user", "alice")
BOB = InstanceKey("s", "user", "bob")
NOW = 1_000_000.0


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_idem", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


def _open(kind: str, where: Path | str) -> IdempotencyStore:
    if kind == "sqlite":
        from mail.store.idempotency import SqliteIdempotencyStore

        return SqliteIdempotencyStore(where)
    from mail.store.idempotency import PostgresIdempotencyStore

    return PostgresIdempotencyStore(str(where))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[IdempotencyStore]:
    if request.param == "memory":
        yield MemoryIdempotencyStore()
        return
    where = tmp_path / "mail.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    opened = _open(request.param, where)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.purge(NOW * 10)  # the PostgreSQL schema is shared by the module's tests
        await opened.close()


def record(
    fingerprint: str = "fp", *, at: float = NOW, ttl: float = 100.0, **extra: object
) -> KeyRecord:
    return KeyRecord(fingerprint, at, at + ttl, **extra)  # type: ignore[arg-type]


async def test_a_key_is_taken_once_and_read_back(store: IdempotencyStore) -> None:
    first = record(subject="task-1", context={"after": 3, "stream": False}, holder="h1")
    assert await store.take(ALICE, "k", first) is None
    held = await store.take(ALICE, "k", record(subject="task-2"))
    assert held is not None and held.subject == "task-1" and not held.finished
    got = await store.get(ALICE, "k", NOW + 1)
    assert got is not None
    assert (got.fingerprint, got.subject, got.context, got.holder) == (
        "fp",
        "task-1",
        {"after": 3, "stream": False},
        "h1",
    )
    # Another caller's key of the same value is another key.
    assert await store.get(BOB, "k", NOW + 1) is None
    assert await store.take(BOB, "k", record("other")) is None


async def test_outcome_is_kept_and_release_forgets(store: IdempotencyStore) -> None:
    assert await store.take(ALICE, "k", record()) is None
    await store.finish(ALICE, "k", 200, "application/json", b'{"response":"done"}')
    got = await store.get(ALICE, "k", NOW + 1)
    assert got is not None and got.finished
    assert (got.status, got.content_type, got.body) == (
        200,
        "application/json",
        b'{"response":"done"}',
    )
    await store.release(ALICE, "k")
    assert await store.get(ALICE, "k", NOW + 1) is None
    assert await store.take(ALICE, "k", record("new")) is None


async def test_expired_records_are_absent_overwritten_and_purged(store: IdempotencyStore) -> None:
    assert await store.take(ALICE, "old", record(ttl=10)) is None
    assert await store.take(ALICE, "new", record(ttl=1000)) is None
    assert await store.count(ALICE, NOW + 1) == 2
    assert await store.get(ALICE, "old", NOW + 20) is None
    assert await store.count(ALICE, NOW + 20) == 1
    # An expired key can be taken again, by any request.
    assert await store.take(ALICE, "old", record("different", at=NOW + 20)) is None
    assert await store.purge(NOW + 5000, ALICE) == 2
    assert await store.count(ALICE, NOW) == 0


async def test_takeover_needs_the_same_unfinished_request(store: IdempotencyStore) -> None:
    assert await store.take(ALICE, "k", record(subject="t1", holder="dead")) is None
    # Another request (fingerprint) cannot take it over; the same one can.
    assert await store.take(ALICE, "k", record("other"), replace=True) is not None
    assert await store.take(ALICE, "k", record(subject="t1", holder="new"), replace=True) is None
    got = await store.get(ALICE, "k", NOW)
    assert got is not None and got.holder == "new"
    # A finished one is never taken over: its outcome is what a retry gets.
    await store.finish(ALICE, "k", 200, None, b"x")
    assert await store.take(ALICE, "k", record(), replace=True) is not None


async def test_two_takeovers_of_one_dead_attempt_one_wins(store: IdempotencyStore) -> None:
    """Two retries of a request whose process died (on two front ends, at the same moment)
    both found its unfinished record and both take it over: the first does; the second is
    told of the first's record (409 for it), not given the key too. Found by an attack round
    on `idempotency_takeover_after`: a takeover replaced any unfinished record of the same
    request, another takeover's too, so both retries ran the work."""
    assert await store.take(ALICE, "k", record(subject="t1", holder="dead")) is None
    dead = await store.get(ALICE, "k", NOW)
    assert dead is not None
    first = record(subject="t1", holder="b", at=NOW + 1)
    assert await store.take(ALICE, "k", first, replace=True, over=dead.created_at) is None
    second = record(subject="t1", holder="c", at=NOW + 1)
    held = await store.take(ALICE, "k", second, replace=True, over=dead.created_at)
    assert held is not None and held.holder == "b"
    got = await store.get(ALICE, "k", NOW + 1)
    assert got is not None and got.holder == "b"
    # Seen as it is now, it can be taken over (b died too).
    third = record(subject="t1", holder="c", at=NOW + 2)
    assert await store.take(ALICE, "k", third, replace=True, over=got.created_at) is None


async def test_concurrent_takes_one_winner(store: IdempotencyStore) -> None:
    results = await asyncio.gather(*(store.take(ALICE, "race", record(f"fp{i}")) for i in range(8)))
    assert sum(r is None for r in results) == 1


async def test_takes_batched_with_held_keys(store: IdempotencyStore) -> None:
    """Takes arriving together (one statement in SQLite): a held key among them is refused
    with its holder's record, the others are taken, and each request hears its own."""
    assert await store.take(ALICE, "held", record("fp-held", subject="t-held")) is None
    results = await asyncio.gather(
        store.take(ALICE, "new-1", record("fp-1")),
        store.take(ALICE, "held", record("fp-held", holder="retry")),
        store.take(BOB, "held", record("fp-bob")),  # another caller's key of the same value
        store.take(ALICE, "new-2", record("fp-2")),
    )
    assert results[0] is None and results[2] is None and results[3] is None
    assert results[1] is not None and results[1].subject == "t-held"
    for scope, key, fingerprint in ((ALICE, "new-1", "fp-1"), (BOB, "held", "fp-bob")):
        got = await store.get(scope, key, NOW)
        assert got is not None and got.fingerprint == fingerprint
    got = await store.get(ALICE, "held", NOW)
    assert got is not None and got.holder != "retry"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_records_survive_reopening(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = tmp_path / "mail.db" if kind == "sqlite" else request.getfixturevalue("pg_url")
    first = _open(kind, where)
    await first.start()
    await first.take(ALICE, "durable", record(subject="task-9"))
    await first.close()
    second = _open(kind, where)
    await second.start()
    try:
        got = await second.get(ALICE, "durable", NOW)
        assert got is not None and got.subject == "task-9"
    finally:
        await second.purge(NOW * 10)
        await second.close()


async def test_postgres_keys_before_start_and_after_close_are_unavailable(pg_url: str) -> None:
    """A key store not started (or closed) answers StoreUnavailableError: a 503, not a crash."""
    from mail.store.base import StoreUnavailableError

    store = _open("postgres", pg_url)
    with pytest.raises(StoreUnavailableError, match="not started"):
        await store.get(ALICE, "k", NOW)
    await store.start()
    await store.close()
    with pytest.raises(StoreUnavailableError, match="not started"):
        await store.take(ALICE, "k", record())


def test_sqlite_migration_adds_the_table(tmp_path: Path) -> None:
    from mail.store.sqlite_schema import connect, migrate

    conn = connect(tmp_path / "old.db")
    migrate(conn)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "idempotency_keys" in tables
    assert [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version")][
        -1
    ] >= 2
    conn.close()


async def test_sqlite_take_waits_for_the_lock_off_the_event_loop(
    tmp_path: Path,
) -> None:
    """A take commits on the database thread: while another writer (the task store's batch)
    holds the file's lock, it waits there for the lock; the event loop never blocks on it."""
    from mail.store.idempotency import SqliteIdempotencyStore
    from mail.store.sqlite_schema import connect

    store = SqliteIdempotencyStore(tmp_path / "mail.db")
    await store.start()
    other = connect(tmp_path / "mail.db")
    try:
        assert await store.take(ALICE, "free", record()) is None
        other.execute("BEGIN IMMEDIATE")  # a writer holds the lock
        taking = asyncio.ensure_future(store.take(ALICE, "busy", record()))
        ticks = 0
        while ticks < 20:  # the loop keeps running meanwhile
            await asyncio.sleep(0.01)
            ticks += 1
        assert not taking.done()
        other.execute("COMMIT")
        assert await asyncio.wait_for(taking, 30) is None
        got = await store.get(ALICE, "busy", NOW)
        assert got is not None and got.fingerprint == "fp"
    finally:
        other.close()
        await store.close()


async def test_the_oldest_finished_records_are_evicted(store: IdempotencyStore) -> None:
    for n in range(4):
        assert await store.take(ALICE, f"e{n}", record(f"fp{n}", at=NOW + n)) is None
    assert await store.take(BOB, "e0", record("fp0", at=NOW - 5)) is None
    for n in (0, 1, 3):
        await store.finish(ALICE, f"e{n}", 200, "application/json", b"{}")
    await store.finish(BOB, "e0", 200, "application/json", b"{}")
    assert await store.evict_finished(ALICE, 2) == 2
    live = {n for n in range(4) if await store.get(ALICE, f"e{n}", NOW) is not None}
    assert live == {2, 3}  # the two oldest finished went; the unfinished one stays
    assert await store.evict_finished(ALICE, 10) == 1
    assert await store.get(ALICE, "e2", NOW) is not None
    assert await store.get(BOB, "e0", NOW) is not None  # another caller's: untouched


async def test_at_the_bound_finished_keys_make_room_and_unfinished_ones_refuse() -> None:
    """A caller past `max_idempotency_keys_per_caller` (MAILClient keys every call) keeps
    working: its oldest answered keys are forgotten; only keys whose requests are all still
    under way are a 429."""
    from fastapi import HTTPException
    from starlette.responses import Response

    from mail.server.auth import Caller
    from mail.server.idempotency import IdempotencyGuard, KeyHeld

    guard = IdempotencyGuard(
        MemoryIdempotencyStore(), swarm_name="s", ttl=100.0, max_keys=2, max_length=255
    )
    caller = Caller("user", "alice", "k")

    async def run(key: str, *, finish: bool = True) -> None:
        ticket = guard.open(caller, key, f"fp-{key}")
        try:
            await ticket.take()
            if finish:
                await ticket.finish(Response(b"{}", media_type="application/json"))
        finally:
            ticket.leave()

    for key in ("a", "b", "c", "d"):
        await run(key)  # past the bound: the oldest answered key makes room each time
    scope = guard.scope(caller)
    assert await guard.store.count(scope, time.time()) == 2
    assert await guard.store.get(scope, "a", time.time()) is None
    with pytest.raises(KeyHeld):  # a repeat at the bound finds its own key, never evicts it
        await run("d")
    await run("e", finish=False)
    await run("f", finish=False)
    with pytest.raises(HTTPException) as refused:
        await run("g")
    assert refused.value.status_code == 429
    assert "max_idempotency_keys_per_caller = 2" in str(refused.value.detail)


async def _keyed_request(guard: Any, caller: Any, n: int) -> None:
    """A request with key ``k<n>`` through the guard: taken, answered, let go."""
    from starlette.responses import Response

    ticket = guard.open(caller, f"k{n}", f"fp-{n}")
    try:
        await ticket.take()
        await ticket.finish(Response(b"{}", media_type="application/json"))
    finally:
        ticket.leave()


async def test_at_the_key_bound_a_tenth_of_it_is_forgotten_at_once() -> None:
    """A caller that keys every call sits at its bound for good: making room reads and
    rewrites its keys (a count, the oldest finished ones), so it is done for a tenth of the
    bound at a time, not for every request (at 1%, a caller at a 10,000-key bound cost 50%
    more CPU per request in bench/http.py)."""

    from mail.server.auth import Caller
    from mail.server.idempotency import IdempotencyGuard

    class Counting(MemoryIdempotencyStore):
        evictions = 0

        async def evict_finished(self, scope: Any, count: int, *keep: Any) -> int:
            Counting.evictions += 1
            return await super().evict_finished(scope, count, *keep)

    guard = IdempotencyGuard(Counting(), swarm_name="s", ttl=100.0, max_keys=50, max_length=255)
    caller = Caller("user", "alice", "k")
    for n in range(50 + 20):
        await _keyed_request(guard, caller, n)
    scope = guard.scope(caller)
    assert Counting.evictions == 4  # 20 keys past the bound, room made 5 at a time
    assert await guard.store.count(scope, time.time()) == 50
    assert await guard.store.get(scope, "k19", time.time()) is None  # the oldest went first
    assert await guard.store.get(scope, "k20", time.time()) is not None


async def test_sqlite_close_waits_for_takes_under_way(tmp_path: Path) -> None:
    """Takes queued when the store closes are committed first (their requests heard they
    hold the key); a take after the close fails instead of waiting forever."""
    from mail.store.idempotency import SqliteIdempotencyStore

    store = SqliteIdempotencyStore(tmp_path / "mail.db")
    await store.start()
    taking = [asyncio.ensure_future(store.take(ALICE, f"k{n}", record())) for n in range(5)]
    await asyncio.sleep(0)  # queued, the hop not back yet
    await store.close()
    assert all(t.done() for t in taking)
    assert [t.result() for t in taking] == [None] * 5
    with pytest.raises(sqlite3.OperationalError):
        await asyncio.wait_for(store.take(ALICE, "late", record()), 30)
    reopened = SqliteIdempotencyStore(tmp_path / "mail.db")
    await reopened.start()
    try:
        for n in range(5):
            assert await reopened.get(ALICE, f"k{n}", NOW) is not None
    finally:
        await reopened.close()


async def test_sqlite_keys_of_a_version_3_file_survive_the_rowid_rebuild(tmp_path: Path) -> None:
    """Migration 4 turns the WITHOUT ROWID key table of a file made by migration 3 into a
    rowid table, and the keys it held (a retry after the upgrade's restart) are still there."""
    from mail.store import sqlite_schema
    from mail.store.idempotency import SqliteIdempotencyStore

    path = tmp_path / "mail.db"
    conn = sqlite_schema.connect(path)
    write_schema(conn, 3)
    conn.execute(
        "INSERT INTO idempotency_keys (swarm_name, caller_role, caller_id, idem_key, "
        "fingerprint, subject, created_at, expires_at, status, body) "
        "VALUES ('s', 'user', 'alice', 'old', 'fp', 't-1', ?, ?, 200, x'7b7d')",
        (NOW, NOW + 100),
    )
    table_sql = "SELECT sql FROM sqlite_master WHERE name = 'idempotency_keys'"
    assert "WITHOUT ROWID" in conn.execute(table_sql).fetchone()[0]
    conn.close()

    store = SqliteIdempotencyStore(path)
    await store.start()  # migrates
    try:
        got = await store.get(ALICE, "old", NOW)
        assert got is not None and got.subject == "t-1" and got.body == b"{}"
        assert await store.take(ALICE, "old", record("fp", holder="retry")) is not None  # held
        assert await store.take(ALICE, "new", record("fp")) is None
    finally:
        await store.close()
    conn = sqlite_schema.connect(path)
    try:
        assert "WITHOUT ROWID" not in conn.execute(table_sql).fetchone()[0]
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] >= 4
    finally:
        conn.close()


@pytest.mark.parametrize("stale_count", [False, True])
@pytest.mark.parametrize("warm", [False, True])
async def test_concurrent_new_keys_never_pass_the_bound(warm: bool, stale_count: bool) -> None:
    """Twenty new keys of one caller at once, each take and count taking a few turns of the
    loop (a store on a database): at most `max_keys` are taken, whether the caller's count
    is known already (`warm`) or read by the first of them, and when a count's answer was
    read before takes that land while it is on its way back (`stale_count`: SQLite's
    buffered keys, queued between the count's flush and its read)."""
    from fastapi import HTTPException

    from mail.server.auth import Caller
    from mail.server.idempotency import IdempotencyGuard

    class SlowStore(MemoryIdempotencyStore):
        async def take(self, *args: Any, **kwargs: Any) -> KeyRecord | None:
            for _ in range(3):
                await asyncio.sleep(0)
            return await super().take(*args, **kwargs)

        async def count(self, scope: InstanceKey, now: float) -> int:
            if stale_count:
                counted = await super().count(scope, now)
                for _ in range(6):  # every take under way lands meanwhile
                    await asyncio.sleep(0)
                return counted
            await asyncio.sleep(0)
            return await super().count(scope, now)

    guard = IdempotencyGuard(SlowStore(), swarm_name="s", ttl=100.0, max_keys=5, max_length=255)
    caller = Caller("user", "alice", "k")
    if warm:
        first = guard.open(caller, "warm", "fp-warm")
        await first.take()  # under way: it holds one of the five

    async def take(key: str) -> None:
        await guard.open(caller, key, f"fp-{key}").take()

    results = await asyncio.gather(*(take(f"k{n}") for n in range(20)), return_exceptions=True)
    taken = [r for r in results if r is None]
    refused = [r for r in results if isinstance(r, HTTPException) and r.status_code == 429]
    assert len(taken) + len(refused) == 20, results
    assert len(taken) == 5 - warm, results
    assert await guard.store.count(guard.scope(caller), time.time()) == 5


async def test_a_keyed_stream_is_not_wrapped_and_records_its_end() -> None:
    """A keyed `EventStreamResponse` goes out as it is (no wrapper coroutine that each of its
    resumptions passes through); when it ends, its ticket records the streamed outcome and
    leaves, as the wrapper did."""
    from mail.server.auth import Caller
    from mail.server.idempotency import IdempotencyGuard
    from mail.server.sse import event_stream_response
    from mail.store.idempotency import STREAMED_OUTCOME

    guard = IdempotencyGuard(
        MemoryIdempotencyStore(), swarm_name="s", ttl=100.0, max_keys=5, max_length=255
    )
    caller = Caller("user", "alice", "k")
    ticket = guard.open(caller, "s1", "fp-s1")
    await ticket.take("task-1")

    async def events() -> AsyncIterator[Any]:
        yield {"event": "task_complete", "data": {"task_id": "task-1"}}

    response = event_stream_response(events())
    assert await ticket.finish(response, lazy=True) is response
    assert ("user", "alice", "s1") in guard._pending  # under way until the stream ends

    sent: list[dict[str, Any]] = []
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await response({"type": "http"}, receive, send)
    assert sent[0]["type"] == "http.response.start"
    await guard.flush_outcomes()
    assert ("user", "alice", "s1") not in guard._pending
    record = await guard.store.get(guard.scope(caller), "s1", time.time())
    assert record is not None and record.status == 200 and record.content_type == STREAMED_OUTCOME


@pytest.mark.parametrize("bound", [1, 2, 5, 9, 20, 50])
async def test_a_finished_key_is_forgotten_after_90_to_100_percent_of_the_bound(
    bound: int,
) -> None:
    """As docs/api-http.md says: at the bound (10% of it, at least one key, forgotten at a
    time) a caller's finished key is kept until 90% to 100% of the bound newer keyed
    requests came after it, and a repeat of a held key never makes room by evicting it."""

    from mail.server.auth import Caller
    from mail.server.idempotency import IdempotencyGuard, KeyHeld

    guard = IdempotencyGuard(
        MemoryIdempotencyStore(), swarm_name="s", ttl=1000.0, max_keys=bound, max_length=255
    )
    caller = Caller("user", "alice", "k")
    scope = guard.scope(caller)
    forgotten: dict[int, int] = {}  # key number: newer keys made when it was forgotten
    for n in range(4 * bound):
        await _keyed_request(guard, caller, n)
        repeat = guard.open(caller, f"k{n}", f"fp-{n}")  # at the bound: its answer, kept
        try:
            with pytest.raises(KeyHeld):
                await repeat.take()
        finally:
            repeat.leave()
        for m in range(n + 1):
            if m not in forgotten and await guard.store.get(scope, f"k{m}", time.time()) is None:
                forgotten[m] = n - m
    assert forgotten and await guard.store.count(scope, time.time()) <= bound
    low = bound - max(1, int(bound * 0.1)) + 1
    assert all(low <= newer <= bound for newer in forgotten.values()), forgotten
