"""A byte-bounded buffer between a task's events and one SSE connection."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

logger = logging.getLogger("mail.server.sse")

OverflowEvent = Callable[[str | None], Any]


class _KeepAlive(bytes):
    """The frame of a ping: it need not wait for a commit (see `chunks`)."""


def _is_ping(frame: bytes) -> bool:
    return type(frame) is _KeepAlive


class BoundedFrameQueue:
    """Frames of one stream, produced by a pump task, consumed by the response body."""

    def __init__(
        self,
        events: AsyncIterator[Any],
        encode: Callable[[Any], bytes],
        max_bytes: int,
        overflow_event: OverflowEvent,
        stall_timeout: float = 5.0,
        opened: asyncio.Event | None = None,
        committed: Callable[[], Awaitable[object] | None] | None = None,
    ) -> None:
        self._events = events
        # Awaited before frames leave (see `chunks`): None, or the store's commit of what
        # was written so far, the frames' events among it.
        self._committed = committed
        # Set (with `_ready`) once a frame is queued or the source ended; a response that
        # holds its headers back until its source says so waits on it (see `start`).
        self.opened = opened
        self._encode = encode
        self.max_bytes = max_bytes
        self.stall_timeout = stall_timeout
        self._overflow_event = overflow_event
        self._frames: collections.deque[bytes] = collections.deque()
        self.buffered_bytes = 0
        self.peak_bytes = 0
        self.last_event_id: str | None = None
        self.overflowed = False
        self._done = False
        self._error: BaseException | None = None
        self._ready = asyncio.Event()
        # Pings queued (marked `_KeepAlive`), and an event set when one is queued or a commit
        # that `chunks` waits for is done: the wait wakes for these alone, not for each event.
        self._pings = 0
        self._ping_ready = asyncio.Event()
        self._room = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._pumping = False
        self._ending: OverflowEvent | None = None

    def end_now(self, final_event: OverflowEvent) -> None:
        """Stop reading the source at its current wait and end with ``final_event(last id)``.

        Used when the server shuts down: the stream closes cleanly (see
        :mod:`mail.server.stream_shutdown`) instead of waiting for its task.
        """
        if self._done or self._ending is not None:
            return
        self._ending = final_event
        # A pump that has not taken its first step yet sees ``_ending`` itself (cancelling it
        # then would skip its handler, and the final event with it).
        if self._pumping and self._pump_task is not None:
            self._pump_task.cancel()

    async def _wait_for_room(self, size: int) -> bool:
        """Wait until ``size`` more bytes fit; False when the reader stalls too long."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stall_timeout
        while self._frames and self.buffered_bytes + size > self.max_bytes:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._room.clear()
            try:
                async with asyncio.timeout(remaining):  # no extra task, unlike wait_for
                    await self._room.wait()
            except TimeoutError:
                return False
        return True

    def _wake(self) -> None:
        self._ready.set()
        if self.opened is not None:
            self.opened.set()

    def refused(self) -> BaseException | None:
        """What ended the source before its first event when that was the store refusing
        (StoreUnavailableError): the response is then a 503, not an empty stream."""
        from mail.store.base import StoreUnavailableError

        error = self._error
        if self._done and not self._frames and isinstance(error, StoreUnavailableError):
            return error
        return None

    def start(self) -> None:
        """Read the source from now on, before the body is asked for (see `opened`)."""
        if self._pump_task is None:
            self._pump_task = asyncio.create_task(self._pump())

    async def stop(self) -> None:
        """Stop reading the source (it is closed); nothing happens if it never started."""
        pump = self._pump_task
        if pump is None:
            return
        if not pump.done():
            pump.cancel()
        try:
            await asyncio.shield(asyncio.gather(pump, return_exceptions=True))
        except asyncio.CancelledError:
            pass

    async def _pump(self) -> None:
        events = self._events
        self._pumping = True
        try:
            if self._ending is not None:
                raise asyncio.CancelledError  # ended before it started: don't read the source
            async for event in events:
                frame = self._encode(event)
                if not await self._wait_for_room(len(frame)):
                    self.overflowed = True
                    notice = self._encode(self._overflow_event(self.last_event_id))
                    self._frames.append(notice)
                    self.buffered_bytes += len(notice)
                    logger.info(
                        "SSE consumer too slow: %d bytes waiting for %.1fs; asked it to "
                        "resubscribe after event %s",
                        self.buffered_bytes,
                        self.stall_timeout,
                        self.last_event_id,
                    )
                    break
                self.buffered_bytes += len(frame)
                self.peak_bytes = max(self.peak_bytes, self.buffered_bytes)
                if isinstance(event, dict):
                    event_id, name = event.get("id"), event.get("event")
                else:
                    event_id, name = getattr(event, "id", None), getattr(event, "event", None)
                if event_id is not None:
                    self.last_event_id = str(event_id)
                elif name == "ping" and self._committed is not None:
                    frame = _KeepAlive(frame)
                    self._pings += 1
                    self._ping_ready.set()
                self._frames.append(frame)
                self._wake()
        except asyncio.CancelledError:
            if self._ending is None:
                raise
            final = self._encode(self._ending(self.last_event_id))
            self._frames.append(final)
            self.buffered_bytes += len(final)
        except Exception as exc:  # handed to the response, which logs it and drops the stream
            self._error = exc
        finally:
            self._done = True
            self._wake()
            # Close the source now so its subscription (and instance lease) is dropped at once.
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except RuntimeError:
                    pass  # already closing (the cancellation path)

    async def chunks(self) -> AsyncGenerator[tuple[bytes, bool], None]:
        """The body: ``(chunk, last)`` in order until the source ends or overflowed."""
        self.start()
        frames = self._frames
        try:
            while True:
                if frames:
                    # A frame leaves once its event is committed: after a crash the task's
                    # events go on from the last stored one, and an id a reader was sent is
                    # never issued again with other content. Frames queued during the wait
                    # wait for the next commit; pings (no id, nothing stored) don't wait:
                    # they leave meanwhile, so a slow commit does not silence the stream.
                    wait = None
                    if self._committed is not None and not all(map(_is_ping, frames)):
                        wait = self._committed()
                    if wait is not None:
                        held = len(frames)  # (one at least is not a ping: it stays)
                        commit = asyncio.ensure_future(wait)
                        commit.add_done_callback(lambda _: self._ping_ready.set())
                        try:
                            while not commit.done():
                                if self._pings:
                                    pings, held = self._take_pings(held)
                                    if pings:
                                        yield pings, False
                                        continue
                                self._ping_ready.clear()
                                await self._ping_ready.wait()
                            await commit
                        finally:
                            if not commit.done():
                                if commit is not wait:  # (not a future others share)
                                    commit.cancel()
                            elif not commit.cancelled():
                                commit.exception()  # retrieved (raised above, or moot)
                        chunk = b"".join([frames.popleft() for _ in range(held)])
                    else:
                        chunk = b"".join(frames)  # (one frame: itself, a ping's as bytes)
                        frames.clear()
                        self._pings = 0
                    self.buffered_bytes -= len(chunk)
                    self._room.set()
                    yield chunk, self._done and not frames and self._error is None
                    continue
                if self._done:
                    break
                self._ready.clear()
                await self._ready.wait()
            if self._error is not None:
                raise self._error
        finally:
            await self.stop()

    def _take_pings(self, held: int) -> tuple[bytes, int]:
        """The queued pings, taken out of the queue, and how many of its first ``held`` frames
        are left."""
        frames = self._frames
        self._pings = 0  # (a count that may run high: pings that left in a chunk)
        pings = b"".join([frame for frame in frames if _is_ping(frame)])
        if not pings:
            return b"", held
        held -= sum(map(_is_ping, itertools.islice(frames, held)))
        rest = [frame for frame in frames if not _is_ping(frame)]
        frames.clear()
        frames.extend(rest)
        self.buffered_bytes -= len(pings)
        self._room.set()
        return pings, held

    async def frames(self) -> AsyncIterator[bytes]:
        """The chunks alone (see :meth:`chunks`)."""
        chunks = self.chunks()
        try:
            async for chunk, _ in chunks:
                yield chunk
        finally:
            await chunks.aclose()
