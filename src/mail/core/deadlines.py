"""Timeouts of many waiting futures on one loop timer (`Deadlines`)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from typing import Any

# Entries answered before they are compacted away: below this many the heap is left alone.
_COMPACT_MIN = 64

# An entry is a list [when, seq, slot]: compared in C by (when, seq), seq unique. Its slot holds
# the future while the deadline may still fire, _COUNTED once the waiter said it is done with it
# (counted in `answered`, left in the heap), and None once it left the heap unanswered (expired,
# or done and dropped at compaction before its waiter said so). A future is done some passes
# before its waiter resumes and says so: only the slot tells a counted entry from such a one,
# so that no answer is counted twice against the entries still waiting.
Entry = list[Any]
_COUNTED: Any = object()


class _LoopDeadlines:
    """The deadlines of the futures of one event loop."""

    __slots__ = ("loop", "heap", "timer", "timer_at", "answered", "_seq")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[Entry] = []
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = math.inf
        self.answered = 0  # entries whose slot is _COUNTED (in the heap)
        self._seq = itertools.count()  # ties never compare futures

    def add(self, delay: float, future: asyncio.Future[Any]) -> Entry:
        when = self.loop.time() + delay
        entry = [when, next(self._seq), future]
        heapq.heappush(self.heap, entry)
        if when < self.timer_at:
            self._arm(when)
        return entry

    def answered_one(self, entry: Entry) -> None:
        if entry[2] is None:
            return  # it left the heap already
        entry[2] = _COUNTED
        self.answered += 1
        if self.answered == len(self.heap):  # nothing left to expire: no timer, no entries
            self.heap.clear()
            self.answered = 0
            if self.timer is not None:
                self.timer.cancel()
                self.timer, self.timer_at = None, math.inf
        elif self.answered >= _COMPACT_MIN and 2 * self.answered > len(self.heap):
            kept = []
            for other in self.heap:
                slot = other[2]
                if slot is _COUNTED:
                    continue
                if slot.done():
                    other[2] = None  # its waiter has yet to say so: not to be counted then
                    continue
                kept.append(other)
            heapq.heapify(kept)
            self.heap = kept
            self.answered = 0

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = when
        self.timer = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.timer, self.timer_at = None, math.inf
        heap, now = self.heap, self.loop.time()
        while heap:
            entry = heap[0]
            slot = entry[2]
            if slot is _COUNTED:
                heapq.heappop(heap)
                self.answered -= 1
                continue
            if entry[0] > now and not slot.done():
                break
            heapq.heappop(heap)
            entry[2] = None
            if not slot.done():
                slot.set_exception(TimeoutError())
        if heap:
            self._arm(heap[0][0])


class Deadlines:
    """Expire each added future with TimeoutError once its delay has passed (unless it
    finished first); one loop timer for all of them."""

    __slots__ = ("_current", "_others")

    def __init__(self) -> None:
        self._current: _LoopDeadlines | None = None
        # Other loops' deadlines, kept until their loop is closed (a runtime used by two).
        self._others: dict[asyncio.AbstractEventLoop, _LoopDeadlines] = {}

    def _of(self, loop: asyncio.AbstractEventLoop) -> _LoopDeadlines:
        current = self._current
        if current is not None and current.loop is loop:
            return current
        if current is not None:
            self._others[current.loop] = current
        for other in [o for o in self._others if o.is_closed()]:
            del self._others[other]
        found = self._others.pop(loop, None) or _LoopDeadlines(loop)
        self._current = found
        return found

    def add(self, delay: float, future: asyncio.Future[Any]) -> Entry:
        """Expire `future` (of the running loop) after `delay` seconds; the entry returned
        goes back to `answered` when the waiter is done with the future."""
        return self._of(asyncio.get_running_loop()).add(delay, future)

    def answered(self, future: asyncio.Future[Any], entry: Entry) -> None:
        """The waiter of `future` (added before as `entry`) is done with it: its entry may go
        (one that expired is gone)."""
        if not future.done():
            future.cancel()  # its waiter went without it (closed): nothing to expire
        loop = future.get_loop()
        current = self._current
        state = current if current is not None and current.loop is loop else self._others.get(loop)
        if state is not None:
            state.answered_one(entry)
