"""Riders of the write-behind buffer (`WriteBehindBuffer.put_rider`): small items written with
the next batch cut, ahead of the queue's items, all of a batch's riders as one item. A
rider is committed no later than anything submitted after it; `flush` and `rider_written`
wait for it as for a queued item; a rejected batch still costs only its bad row."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

import pytest

from mail.store.writer import WriteBehindBuffer


class Recorder:
    """The buffer's `apply` and `write_now`, recorded; riders merge into ("riders", ...)."""

    def __init__(self, now: bool = False) -> None:
        self.applied: list[list[Any]] = []
        self.written_now: list[list[Any]] = []
        self.now = now
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        self.reject: set[Any] = set()

    async def apply(self, batch: Sequence[Any]) -> None:
        self.entered.set()
        await self.gate.wait()
        bad = [item for item in batch if item in self.reject or _has_bad_row(item, self.reject)]
        if bad:
            raise ValueError(f"rejected {bad}")
        self.applied.append(list(batch))

    def write_now(self, batch: list[Any]) -> bool:
        if not self.now:
            return False
        self.written_now.append(list(batch))
        return True


def _has_bad_row(item: Any, reject: set[Any]) -> bool:
    return isinstance(item, tuple) and item[:1] == ("riders",) and bool(reject & set(item[1:]))


def _merge(riders: list[Any]) -> Any:
    return ("riders", *riders)


def _split(item: Any) -> list[Any]:
    if isinstance(item, tuple) and item[:1] == ("riders",):
        return [("riders", row) for row in item[1:]]
    return []


def _buffer(recorder: Recorder, **options: Any) -> WriteBehindBuffer[Any]:
    settings: dict[str, Any] = {
        "is_transient": lambda exc: isinstance(exc, sqlite3.OperationalError),
        "max_delay": 0.0,
        "retry_initial": 0.01,
        "merge_riders": _merge,
        "split": _split,
        **options,
    }
    return WriteBehindBuffer(recorder.apply, **settings)


async def test_riders_go_ahead_of_the_next_batch_as_one_item() -> None:
    recorder = Recorder()
    buffer = _buffer(recorder)
    recorder.gate.clear()  # the worker holds its first batch until told
    buffer.start()
    try:
        await buffer.submit(1)
        await recorder.entered.wait()  # batch [1] is being written
        first = buffer.put_rider("k1")
        await buffer.submit(2)
        second = buffer.put_rider("k2")
        await buffer.submit(3)
        assert (first, second) == (1, 2)
        assert not buffer.rider_written(first) and buffer.pending == 5  # 1 is being written
        recorder.gate.set()
        assert await buffer.flush(5)
        # Cut after both riders: they lead the next batch, as one item, in their order.
        assert recorder.applied == [[1], [("riders", "k1", "k2"), 2, 3]]
        assert buffer.rider_written(second) and buffer.pending == 0
    finally:
        await buffer.close(5)


async def test_a_flush_waits_for_riders_alone() -> None:
    """Riders with nothing queued after them are written all the same: `flush` (and the
    worker, woken by the first of them) does not take an empty queue for a written one."""
    recorder = Recorder()
    buffer = _buffer(recorder, max_delay=30.0)
    buffer.start()
    try:
        mark = buffer.put_rider("k1")
        assert buffer.pending == 1 and not buffer.rider_written(mark)
        assert await buffer.flush(5)
        assert recorder.applied == [[("riders", "k1")]]
        assert buffer.rider_written(mark) and buffer.pending == 0
        # The worker wakes for a rider on its own too (no flush asked for).
        quick_recorder = Recorder()
        quick = _buffer(quick_recorder)
        quick.start()
        try:
            quick.put_rider("k2")
            while not quick_recorder.applied:
                await asyncio.sleep(0.01)
            assert quick_recorder.applied == [[("riders", "k2")]]
        finally:
            await quick.close(5)
    finally:
        await buffer.close(5)


@pytest.mark.parametrize("writes", [True, False])
async def test_a_flush_that_writes_at_once_takes_the_riders(writes: bool) -> None:
    """The flush writes the riders with its batch, or (its write declined) hands both to the
    worker, which writes them once."""
    recorder = Recorder(now=writes)
    buffer = _buffer(
        recorder, max_delay=30.0, write_now=recorder.write_now, alone=lambda queue: True
    )
    buffer.start()
    try:
        mark = buffer.put_rider("k1")
        await buffer.submit(1)
        assert await buffer.flush(5)
        done = recorder.written_now if writes else recorder.applied
        assert done == [[("riders", "k1"), 1]]
        assert (recorder.applied if writes else recorder.written_now) == []
        assert buffer.rider_written(mark) and buffer.pending == 0
    finally:
        await buffer.close(5)


async def test_a_rejected_batch_costs_only_its_bad_rider() -> None:
    recorder = Recorder()
    recorder.reject = {"bad"}
    buffer = _buffer(recorder)
    recorder.gate.clear()
    buffer.start()
    try:
        await buffer.submit(1)
        await recorder.entered.wait()
        for rider in ("k1", "bad", "k2"):
            buffer.put_rider(rider)
        await buffer.submit(2)
        recorder.gate.set()
        assert await buffer.flush(5)
        assert recorder.applied == [[1], [("riders", "k1")], [("riders", "k2")], [2]]
        assert buffer.dropped == 1 and buffer.pending == 0
    finally:
        await buffer.close(5)


async def test_a_full_buffer_takes_no_rider() -> None:
    recorder = Recorder()
    buffer = _buffer(recorder, max_pending=2)  # not started: nothing is written
    await buffer.submit(1)
    await buffer.submit(2)
    assert buffer.put_rider("k1") == 0
    assert buffer.pending == 2


async def test_without_merge_riders_there_are_none() -> None:
    buffer: WriteBehindBuffer[Any] = WriteBehindBuffer(
        Recorder().apply, is_transient=lambda exc: False
    )
    assert buffer.put_rider("k1") == 0 and buffer.pending == 0


@pytest.mark.parametrize("holding", [False, True])
async def test_close_writes_the_riders(holding: bool) -> None:
    recorder = Recorder()
    # (Holding: the worker cuts its batch at once; idle: it would wait for a fuller one.)
    buffer = _buffer(recorder, max_delay=0.0 if holding else 30.0)
    buffer.start()
    if holding:
        recorder.gate.clear()
        await buffer.submit(1)
        await recorder.entered.wait()
    buffer.put_rider("k1")
    recorder.gate.set()
    assert await buffer.close(5) == 0
    assert recorder.applied[-1] == [("riders", "k1")]
