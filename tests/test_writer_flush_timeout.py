"""`WriteBehindBuffer.flush(timeout)`: the timeout ends the wait with False while the
database is stuck, and a caller's own cancellation goes on as a cancellation (also when it
comes in the same loop pass as the timeout)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from mail.store import writer
from mail.store.writer import WriteBehindBuffer


def _stuck_buffer(gate: asyncio.Event, written: list[int]) -> WriteBehindBuffer[int]:
    async def apply(batch: Sequence[int]) -> None:
        await gate.wait()
        written.extend(batch)

    buffer: WriteBehindBuffer[int] = WriteBehindBuffer(apply, is_transient=lambda _e: False)
    buffer.start()
    return buffer


async def test_a_flush_past_its_timeout_answers_false_and_a_later_one_true() -> None:
    gate, written = asyncio.Event(), []
    buffer = _stuck_buffer(gate, written)
    buffer.put_nowait(1)
    assert await buffer.flush(timeout=0.05) is False
    gate.set()
    assert await buffer.flush(timeout=30) is True
    assert written == [1]
    await buffer.close()


async def test_a_cancelled_flush_is_cancelled_not_false() -> None:
    gate, written = asyncio.Event(), []
    buffer = _stuck_buffer(gate, written)
    buffer.put_nowait(1)
    waiting = asyncio.create_task(buffer.flush(timeout=30))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    gate.set()
    assert await buffer.flush(timeout=30) is True
    await buffer.close()


async def test_a_cancel_in_the_timeouts_own_pass_is_still_a_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate, written = asyncio.Event(), []
    buffer = _stuck_buffer(gate, written)
    buffer.put_nowait(1)
    waiting: asyncio.Task[bool] | None = None

    def expire_then_cancel(waiter: asyncio.Future[None], expired: list[bool]) -> None:
        expire(waiter, expired)
        assert waiting is not None
        waiting.cancel()  # the caller's cancel, before the flush has seen its timeout

    expire = writer._expire
    monkeypatch.setattr(writer, "_expire", expire_then_cancel)
    waiting = asyncio.create_task(buffer.flush(timeout=0.05))
    with pytest.raises(asyncio.CancelledError):
        await waiting
    gate.set()
    await buffer.close()


async def test_a_flush_in_cleanup_after_a_caught_cancellation_still_times_out() -> None:
    # A task that was cancelled and cleans up (its cancel request counted, not withdrawn)
    # flushes with a timeout: as under asyncio.timeout, the timeout answers False, and
    # close() gives up and stops its worker, rather than a CancelledError no one sent.
    gate, written = asyncio.Event(), []
    buffer = _stuck_buffer(gate, written)
    buffer.put_nowait(1)
    started = asyncio.Event()

    async def cleanup_after_cancel() -> tuple[bool, int]:
        try:
            started.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            flushed = await buffer.flush(timeout=0.05)
            return flushed, await buffer.close(timeout=0.05)
        raise AssertionError("not cancelled")

    task = asyncio.create_task(cleanup_after_cancel())
    await started.wait()
    task.cancel()
    assert await task == (False, 1)
    assert not buffer.running
    assert written == []
