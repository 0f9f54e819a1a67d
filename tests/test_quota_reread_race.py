"""A caller's books read again at its bound keep what this server booked during the read.

A caller at a bound has its books read again from the store (`REREAD_AT_BOUND`). The read
awaits the database; a task of the caller that finished meanwhile went into the books
(`FinishedTasks.count`, or its measurement) and is newer than what the read saw. The
re-read replaced the books with the read, so such a task left them: the caller kept it
stored yet had room for more, past `max_stored_bytes_per_caller` (the byte bound lets new
tasks in while the caller is within its last tenth, when the re-read runs). A task this
server forgot meanwhile (retention) must not come back either.

Real `SqliteTaskStore` and `FinishedTasks`; the store's read of the caller's records is
held open by an event so that the task finishes while it runs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from mail.server.finished_tasks import REREAD_AT_BOUND, FinishedTasks, StorageQuota
from mail.store.sqlite import SqliteTaskStore
from support.bare_instances import bare_manager

pytestmark = pytest.mark.timeout(120)

OWNER = ("user", "alice")
MAX_BYTES = 1000


async def test_a_task_booked_while_the_books_are_read_again_stays_in_them(
    tmp_path: Path,
) -> None:
    store = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
    await store.start()
    try:
        quota = StorageQuota(max_bytes=MAX_BYTES, max_tasks=0)
        finished = FinishedTasks(bare_manager(60.0), store, quota)
        quota.record(OWNER, "earlier", 950)  # within the last tenth: at the bound
        quota.record(OWNER, "retired", 10)
        books = quota.books(OWNER)
        assert books is not None
        books.read_at = time.monotonic() - REREAD_AT_BOUND - 1  # a re-read is due
        lifecycle: Any = finished.lifecycle
        read, go = asyncio.Event(), asyncio.Event()
        records = lifecycle.records

        async def held_open(key: Any, **options: Any) -> dict[str, dict[str, Any]]:
            got: dict[str, dict[str, Any]] = await records(key, **options)
            read.set()  # the store was read: what happens now is newer than the read
            await go.wait()
            return {**got, "retired": {"summary": {"stored_bytes": 10}}}

        lifecycle.records = held_open
        rereading = asyncio.create_task(finished.books(*OWNER))
        await asyncio.wait_for(read.wait(), 30)
        quota.record(OWNER, "finished-meanwhile", 300)  # answered while the read ran
        quota.forget(OWNER, ["retired"])  # and one let go by retention meanwhile
        go.set()
        reread = await asyncio.wait_for(rereading, 30)
        assert reread.tasks.get("finished-meanwhile") == 300, dict(reread.tasks)
        assert "retired" not in reread.tasks, dict(reread.tasks)
        assert "earlier" not in reread.tasks  # not in the store: the read's (a prune)
        assert reread.total >= 300
    finally:
        await store.close()
