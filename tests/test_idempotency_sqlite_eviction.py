"""The server's SQLite key store at a caller's bound (`idempotency_sqlite_buffered`): room is
made from the caller's first-written rows when they hold enough finished keys, from all of
its rows otherwise, and always for the oldest finished keys by the time they were taken; a
count right after the caller's expired keys were removed counts what is left."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.buffered_key_store import buffered_key_store

from mail.store.base import InstanceKey
from mail.store.idempotency import KeyRecord
from mail.store.idempotency_sqlite_buffered import BufferedSqliteIdempotencyStore as Store

ALICE = InstanceKey("s", "user", "alice")
BOB = InstanceKey("s", "user", "bob")
NOW = 1_000_000.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with buffered_key_store(tmp_path / "mail.db", Store) as opened:
        yield opened


def record(at: float, ttl: float = 1000.0) -> KeyRecord:
    return KeyRecord("fp", at, at + ttl)


async def live(store: Store, scope: InstanceKey, keys: list[str]) -> set[str]:
    return {k for k in keys if await store.get(scope, k, NOW) is not None}


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


async def test_the_oldest_by_take_time_go_first_among_the_first_rows(store: Store) -> None:
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
