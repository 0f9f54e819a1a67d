"""A flush that finds the write-behind worker idle and only its own work queued (`alone`)
writes the queue itself (`write_now`): a lone caller's answer waits for one commit, not for
two task switches around it. With other work queued the worker writes it (the requests
finishing meanwhile share its commit). A declined or failing write goes to the worker,
which writes it in order with its retries."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from mail.store import InstanceKey
from mail.store.sqlite import SqliteTaskStore
from mail.store.writer import WriteBehindBuffer

KEY = InstanceKey("demo", "user", "u-1")


class Recorder:
    """The buffer's `apply` (the worker's writes) and `write_now` (the flush's), recorded."""

    def __init__(self, now: str = "write") -> None:
        self.now = now  # "write", "decline" or "raise"
        self.applied: list[list[int]] = []
        self.written_now: list[list[int]] = []
        self.prepared = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def apply(self, batch: Sequence[int]) -> None:
        await self.gate.wait()
        self.applied.append(list(batch))

    def write_now(self, batch: list[int]) -> bool:
        if self.now == "raise":
            raise sqlite3.OperationalError("disk I/O error")
        if self.now == "decline":
            return False
        self.written_now.append(list(batch))
        return True

    def prepare(self, batch: list[int], queue: deque[int]) -> tuple[int, list[int]]:
        self.prepared += 1
        return len(batch), [item * 10 for item in batch]


def _buffer(recorder: Recorder, alone: bool = True) -> WriteBehindBuffer[int]:
    return WriteBehindBuffer(
        recorder.apply,
        is_transient=lambda exc: isinstance(exc, sqlite3.OperationalError),
        max_delay=30.0,  # the worker would wait this long for a fuller batch
        retry_initial=0.01,
        prepare=recorder.prepare,
        write_now=recorder.write_now,
        alone=lambda queue: alone,
    )


async def test_a_flush_writes_the_queue_itself_when_the_worker_is_idle() -> None:
    recorder = Recorder()
    buffer = _buffer(recorder)
    buffer.start()
    try:
        for item in (1, 2, 3):
            await buffer.submit(item)
        await asyncio.sleep(0)  # the worker now waits for a fuller batch
        assert await buffer.flush(5)
        assert recorder.written_now == [[10, 20, 30]]  # prepared once, written by the flush
        assert recorder.applied == [] and recorder.prepared == 1
        assert buffer.pending == 0
        # The worker, woken by more items later, finds only those.
        await buffer.submit(4)
        assert await buffer.flush(5)
        assert recorder.written_now == [[10, 20, 30], [40]]
        assert recorder.applied == []
    finally:
        await buffer.close(5)


async def test_with_other_work_queued_the_worker_writes_one_batch_for_all() -> None:
    recorder = Recorder()
    buffer = _buffer(recorder, alone=False)
    buffer.start()
    try:
        for item in (1, 2):
            await buffer.submit(item)
        first = asyncio.ensure_future(buffer.flush(5))
        await buffer.submit(3)  # another request finishing in the same round of the loop
        second = asyncio.ensure_future(buffer.flush(5))
        assert await first and await second
        assert recorder.written_now == []
        assert recorder.applied == [[10, 20, 30]]  # one commit for both
    finally:
        await buffer.close(5)


async def test_a_declined_or_failing_write_is_written_by_the_worker_once() -> None:
    for now in ("decline", "raise"):
        recorder = Recorder(now)
        buffer = _buffer(recorder)
        buffer.start()
        try:
            for item in (1, 2):
                await buffer.submit(item)
            assert await buffer.flush(5)
            # The batch the flush cut and prepared is the one the worker writes (not cut
            # again: a store's prepare takes live writes once).
            assert recorder.applied == [[10, 20]], now
            assert recorder.prepared == 1 and recorder.written_now == []
            assert buffer.pending == 0
        finally:
            await buffer.close(5)


async def test_a_flush_behind_a_batch_in_flight_waits_for_the_worker() -> None:
    recorder = Recorder()
    buffer = _buffer(recorder)
    buffer.start()
    try:
        recorder.gate.clear()
        await buffer.submit(1)
        first = asyncio.ensure_future(buffer.flush(5))
        await asyncio.sleep(0)
        assert recorder.written_now == [[10]]  # the worker was idle: written by the flush
        assert first.done() and first.result()
        # Now the worker holds a batch (its write waits on the gate): a later flush must not
        # write the items behind it before it (order), so it waits for the worker.
        await buffer.submit(2)
        buffer._urgent.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert buffer._holding
        await buffer.submit(3)
        second = asyncio.ensure_future(buffer.flush(5))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not second.done() and recorder.written_now == [[10]]
        recorder.gate.set()
        assert await second
        assert recorder.applied[0] == [20]
        assert [20, 30] == [item for batch in recorder.applied for item in batch]
    finally:
        recorder.gate.set()
        await buffer.close(5)


async def test_sqlite_commits_a_flushed_batch_in_the_flushing_caller(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    store = SqliteTaskStore(path)
    await store.start()
    worker_batches: list[int] = []
    apply_batch = store._apply_batch

    async def counted(batch: Sequence[object]) -> None:
        worker_batches.append(len(batch))
        await apply_batch(batch)  # type: ignore[arg-type]

    store._buffer._apply = counted  # the worker's writes, counted
    try:
        await store.upsert_task(KEY, {"task_id": "t", "is_running": True})
        await store.append_event(KEY, "t", {"event": "new_message", "data": "x"})
        assert await store.flush(5)
        assert worker_batches == []  # committed by the flush itself
        other = sqlite3.connect(path)
        try:  # committed: another connection sees it at once
            assert other.execute("SELECT count(*) FROM tasks").fetchone()[0] == 1
            assert other.execute("SELECT count(*) FROM task_events").fetchone()[0] == 1
        finally:
            other.close()
        # Two tasks' writes queued (two requests under way): the writer's batch takes both.
        await store.upsert_task(KEY, {"task_id": "t", "is_running": False})
        await store.upsert_task(KEY, {"task_id": "t2", "is_running": True})
        assert await store.flush(5)
        assert worker_batches == [2]
        # One task's again, its journal row (`<task>::journal`) included: the flush writes.
        await store.upsert_task(KEY, {"task_id": "t3", "is_running": True})
        await store.save_queue(KEY, "t3::journal", [{"message": {}}])
        assert await store.flush(5)
        assert worker_batches == [2]
    finally:
        await store.close()
