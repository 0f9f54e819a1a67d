"""BoundedFrameQueue: the per-stream byte bound between a task's events and one SSE client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mail.server.sse import encode_event, resubscribe_event, slow_reader_reason
from mail.server.stream_buffer import BoundedFrameQueue


class Source:
    """An event source like the runtime's: yields ``count`` events, records being closed."""

    def __init__(self, count: int, size: int = 100) -> None:
        self.count = count
        self.size = size
        self.produced = 0
        self.closed = asyncio.Event()

    async def events(self) -> AsyncIterator[Any]:
        try:
            for n in range(1, self.count + 1):
                self.produced = n
                yield {"event": "tick", "data": {"n": n, "pad": "x" * self.size}, "id": str(n)}
                await asyncio.sleep(0)
        finally:
            self.closed.set()


def _queue(source: Source, max_bytes: int, stall: float) -> BoundedFrameQueue:
    return BoundedFrameQueue(
        source.events(),
        encode_event,
        max_bytes,
        lambda last: resubscribe_event("t-1", last, slow_reader_reason(max_bytes, stall)),
        stall,
    )


def _ids(frames: list[bytes]) -> list[str]:
    return [
        line.split(": ", 1)[1]
        for frame in frames
        for line in frame.decode().split("\r\n")
        if line.startswith("id: ")
    ]


async def test_a_reader_that_keeps_up_gets_everything_paced_by_the_bound() -> None:
    source = Source(200)
    queue = _queue(source, 2048, stall=5.0)
    frames = [frame async for frame in queue.frames()]
    assert _ids(frames) == [str(n) for n in range(1, 201)]
    assert not queue.overflowed
    assert queue.peak_bytes <= 2048  # 200 events of ~150 bytes never sat in memory at once
    assert source.closed.is_set()


async def test_a_stalled_reader_is_told_to_resubscribe_after_the_last_id_it_got() -> None:
    source = Source(10_000, size=500)
    queue = _queue(source, 4096, stall=0.2)
    frames: list[bytes] = []
    body = queue.frames()
    frames.append(await anext(body))  # read one frame, then stop reading for a while
    await asyncio.wait_for(source.closed.wait(), 10)  # the pump gave up and closed the source
    assert source.produced < 20  # it stopped at the bound instead of draining the source
    frames += [frame async for frame in body]
    assert queue.overflowed
    # Chunks may carry several frames (what was queued together): compare SSE frames.
    frames = [f + b"\r\n\r\n" for f in b"".join(frames).split(b"\r\n\r\n") if f]
    notice = frames[-1].decode()
    assert "event: resubscribe" in notice
    ids = _ids(frames[:-1])
    assert ids == [str(n) for n in range(1, len(ids) + 1)]
    assert f'"last_event_id":"{ids[-1]}"' in notice
    assert f"after={ids[-1]}" in notice


async def test_closing_the_response_closes_the_source() -> None:
    source = Source(10_000)
    queue = _queue(source, 1 << 20, stall=5.0)
    body = queue.frames()
    await anext(body)
    await body.aclose()  # the client went away
    assert source.closed.is_set()


async def test_a_failing_source_fails_the_stream_after_what_it_produced() -> None:
    async def broken() -> AsyncIterator[Any]:
        yield {"event": "tick", "data": "1", "id": "1"}
        raise ValueError("boom")

    queue = BoundedFrameQueue(broken(), encode_event, 4096, lambda last: {}, 1.0)
    got: list[bytes] = []
    with pytest.raises(ValueError, match="boom"):
        async for frame in queue.frames():
            got.append(frame)
    assert _ids(got) == ["1"]


async def test_frames_queued_together_leave_as_one_chunk() -> None:
    # A turn's events are queued in one go; the response writes them as one chunk.
    async def burst() -> AsyncIterator[Any]:
        for n in range(1, 4):
            yield {"event": "tick", "data": str(n), "id": str(n)}

    queue = BoundedFrameQueue(burst(), encode_event, 1 << 20, lambda last: {}, 1.0)
    chunks = [chunk async for chunk in queue.frames()]
    assert len(chunks) == 1
    assert _ids(chunks) == ["1", "2", "3"]
    assert chunks[0].count(b"\r\n\r\n") == 3


async def test_pings_leave_while_the_events_before_them_wait_for_their_commit() -> None:
    """An event leaves once the store committed it; a ping (no id, not stored) queued behind
    it leaves at once. Before, it waited for the same commit: a slow store silenced the
    stream, then the pings came in a burst."""
    pending: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    commit = asyncio.Event()

    async def source() -> AsyncIterator[Any]:
        while (event := await pending.get()) is not None:
            yield event

    queue = BoundedFrameQueue(
        source(), encode_event, 1 << 20, lambda last: {}, 1.0, committed=commit.wait
    )
    body = queue.frames()
    ping = {"event": "ping", "data": "", "id": None}
    pending.put_nowait({"event": "tick", "data": "1", "id": "1"})
    pending.put_nowait(ping)
    assert await asyncio.wait_for(anext(body), 10) == encode_event(ping)
    # The closing event has no id either, but it keeps its place behind the event that waits.
    pending.put_nowait({"event": "task_complete", "data": "done", "id": None})
    pending.put_nowait(ping)
    assert await asyncio.wait_for(anext(body), 10) == encode_event(ping)
    commit.set()
    pending.put_nowait(None)
    rest = b"".join([chunk async for chunk in body])
    assert _ids([rest]) == ["1"]
    assert rest.index(b"id: 1") < rest.index(b"event: task_complete")
    assert b"event: ping" not in rest
