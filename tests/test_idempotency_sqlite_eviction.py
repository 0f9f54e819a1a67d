"""The server's SQLite key store at a caller's bound (`mail.store.idempotency`): room is
made from the caller's oldest keys when they hold enough finished ones, from all of its keys
otherwise, and always for the oldest finished keys by the time they were (last) taken, not by
where their rows lie in the file (a key taken again after it expired, or taken over after a
crash, keeps its row; keys from a schema-3 file were copied in key order); a count right
after the caller's expired keys were removed counts what is left."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.old_sqlite import write_schema

from mail.store import sqlite_schema
from mail.store.base import InstanceKey
from mail.store.idempotency import KeyRecord
from mail.store.idempotency import SqliteIdempotencyStore as Store

ALICE = InstanceKey("s", "user", "alice")
BOB = InstanceKey("s", "user", "bob")
NOW = 1_000_000.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = Store(tmp_path / "mail.db")
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()


def record(at: float, ttl: float = 1000.0) -> KeyRecord:
    return KeyRecord("fp", at, at + ttl)


async def live(store: Store, scope: InstanceKey, keys: list[str], now: float = NOW) -> set[str]:
    return {k for k in keys if await store.get(scope, k, now) is not None}


async def test_finished_keys_past_a_run_of_unfinished_ones_are_found(store: Store) -> None:
    """The caller's first 200 keys are of requests still under way (no outcome): the rows
    read first hold no finished key, so all of its rows are read; the 50 oldest finished
    keys go, and every unfinished one stays."""
    keys = [f"k{n:03d}" for n in range(300)]
    for n, key in enumerate(keys):
        assert await store.take(ALICE, key, record(NOW + n)) is None
    for key in keys[200:]:
        await store.finish(ALICE, key, 200, "application/json", b"{}")
    assert await store.take(BOB, "k250", record(NOW - 10)) is None
    await store.finish(BOB, "k250", 200, "application/json", b"{}")

    assert await store.evict_finished(ALICE, 50) == 50

    assert await live(store, ALICE, keys) == set(keys[:200]) | set(keys[250:])
    assert await live(store, BOB, ["k250"]) == {"k250"}  # another caller's: untouched


async def test_the_oldest_by_take_time_go_first(store: Store) -> None:
    """Rows written in one order, taken (created) in another: the key taken first goes."""
    times = {"a": NOW + 30, "b": NOW + 10, "c": NOW + 20, "d": NOW + 40}
    for key, at in times.items():
        assert await store.take(ALICE, key, record(at)) is None
        await store.finish(ALICE, key, 200, "application/json", b"{}")

    assert await store.evict_finished(ALICE, 2) == 2

    assert await live(store, ALICE, list(times)) == {"a", "d"}


async def test_a_count_right_after_a_purge_leaves_out_the_expired_keys(store: Store) -> None:
    for n in range(5):  # expired at NOW + 50
        assert await store.take(ALICE, f"old{n}", record(NOW, ttl=50)) is None
    for n in range(3):
        assert await store.take(ALICE, f"new{n}", record(NOW)) is None
    assert await store.take(BOB, "x", record(NOW)) is None
    later = NOW + 60

    assert await store.count(ALICE, later) == 3  # (no purge before)
    assert await store.purge(later, ALICE) == 5
    assert await store.count(ALICE, later) == 3  # (the key index alone)
    assert await store.take(ALICE, "newer", record(later)) is None
    assert await store.count(ALICE, later) == 4
    assert await store.count(BOB, later) == 1


async def test_a_key_taken_again_after_it_expired_is_as_new_as_that_take(store: Store) -> None:
    """k000..k039 taken first (a TTL of 50 s), k040..k099 10 s later, all answered; at
    NOW + 60 the first 40 have expired (not yet swept) and are taken again and answered: the
    caller's newest keys, in its first rows. Room for 10 forgets k040..k049."""
    old = [f"k{n:03d}" for n in range(40)]
    mid = [f"k{n:03d}" for n in range(40, 100)]
    for n, key in enumerate(old):
        assert await store.take(ALICE, key, KeyRecord("fp", NOW + n * 0.01, NOW + 50)) is None
        await store.finish(ALICE, key, 200, "application/json", b"{}")
    for n, key in enumerate(mid):
        assert await store.take(ALICE, key, record(NOW + 10 + n * 0.01)) is None
        await store.finish(ALICE, key, 200, "application/json", b"{}")
    later = NOW + 60
    for n, key in enumerate(old):
        assert (
            await store.take(ALICE, key, KeyRecord("fp2", later + n * 0.01, later + 1000)) is None
        )
        await store.finish(ALICE, key, 200, "application/json", b"{}")

    assert await store.evict_finished(ALICE, 10) == 10

    assert set(old + mid) - await live(store, ALICE, old + mid, later + 1) == set(mid[:10])


async def test_a_key_taken_over_after_a_crash_is_as_new_as_the_takeover(store: Store) -> None:
    """k000..k019 died without an outcome; 80 later keys were answered; then retries took
    k000..k019 over and were answered. Room for 10 forgets k020..k029."""
    dead = [f"k{n:03d}" for n in range(20)]
    rest = [f"k{n:03d}" for n in range(20, 100)]
    for n, key in enumerate(dead):
        assert await store.take(ALICE, key, record(NOW + n * 0.01, ttl=10_000)) is None
    for n, key in enumerate(rest):
        assert await store.take(ALICE, key, record(NOW + 10 + n * 0.01, ttl=10_000)) is None
        await store.finish(ALICE, key, 200, "application/json", b"{}")
    later = NOW + 100
    for n, key in enumerate(dead):
        held = await store.get(ALICE, key, later)
        assert held is not None
        retry = record(later + n * 0.01, ttl=10_000)
        assert await store.take(ALICE, key, retry, replace=True, over=held.created_at) is None
        await store.finish(ALICE, key, 200, "application/json", b"{}")

    assert await store.evict_finished(ALICE, 10) == 10

    assert set(dead + rest) - await live(store, ALICE, dead + rest, later + 1) == set(rest[:10])


async def test_keys_from_a_schema_3_file_go_oldest_first(tmp_path: Path) -> None:
    """A file of the release whose key table was WITHOUT ROWID (schema 3): migration 4 copied
    its keys in key order. Taken z099 (first) to z000 (last): room for 10 forgets z090..z099."""
    path = tmp_path / "mail.db"
    conn = sqlite_schema.connect(path)
    write_schema(conn, 3)
    keys = [f"z{n:03d}" for n in range(100)]
    for n, key in enumerate(keys):
        at = NOW + (100 - n)
        conn.execute(
            "INSERT INTO idempotency_keys (swarm_name, caller_role, caller_id, idem_key,"
            " fingerprint, context, status, holder, created_at, expires_at)"
            " VALUES ('s', 'user', 'alice', ?, 'fp', '{}', 200, '', ?, ?)",
            (key, at, at + 10_000),
        )
    conn.close()
    opened = Store(path)
    await opened.start()  # migrates it to the current schema
    try:
        assert await opened.evict_finished(ALICE, 10) == 10
        assert set(keys) - await live(opened, ALICE, keys, NOW + 200) == set(keys[-10:])
    finally:
        await opened.close()
