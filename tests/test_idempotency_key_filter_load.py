"""The per-caller key table of `BufferedSqliteIdempotencyStore` under load: 20,000 keys of
one caller taken concurrently (the table doubles itself, and past its limit is read again
from the file), then every one of them is held, 20,000 new keys are all free (a false
"present" is read from the file, never answered as taken), and a restarted store holds them
all again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from mail.store.base import InstanceKey
from mail.store.idempotency import KeyRecord
from mail.store.idempotency_sqlite_buffered import BufferedSqliteIdempotencyStore
from mail.store.sqlite import SqliteTaskStore

pytestmark = pytest.mark.timeout(300)

ALICE = InstanceKey("s", "user", "alice")


def _record(subject: str) -> KeyRecord:
    now = time.time()
    return KeyRecord("fp", now, now + 3600, subject=subject, context={"after": 0})


async def _open(path: Path) -> tuple[SqliteTaskStore, BufferedSqliteIdempotencyStore]:
    tasks = SqliteTaskStore(path)
    await tasks.start()
    keys = BufferedSqliteIdempotencyStore(path, tasks)
    await keys.start()
    return tasks, keys


async def test_twenty_thousand_keys_of_one_caller(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    taken = [f"key-{n}" for n in range(20_000)]
    tasks, keys = await _open(path)
    try:
        for first in range(0, len(taken), 500):  # 500 at a time, across the refills
            chunk = taken[first : first + 500]
            got = await asyncio.gather(*(keys.take_with_work(ALICE, k, _record(k)) for k in chunk))
            assert got == [None] * len(chunk)
        held = await asyncio.gather(
            *(keys.take_with_work(ALICE, k, _record("again")) for k in taken[::7])
        )
        assert [h.subject if h else None for h in held] == taken[::7]
        fresh = [str(uuid.uuid4()) for _ in range(20_000)]
        free = [await keys.take_with_work(ALICE, k, _record(k)) for k in fresh]
        assert free == [None] * len(fresh)  # a false "present" never refuses a new key
    finally:
        await keys.close()
        await tasks.close()
    tasks, keys = await _open(path)  # restarted: the filter is read from the file
    try:
        started = time.monotonic()
        assert await keys.take_with_work(ALICE, "after restart", _record("r")) is None
        assert time.monotonic() - started < 10  # 40,000 keys read in one go
        held = await asyncio.gather(
            *(keys.take_with_work(ALICE, k, _record("again")) for k in taken[::101])
        )
        assert [h.subject if h else None for h in held] == taken[::101]
        other = InstanceKey("s", "user", "bob")  # another caller: none of alice's keys
        assert await keys.take_with_work(other, taken[0], _record("bob's")) is None
    finally:
        await keys.close()
        await tasks.close()
