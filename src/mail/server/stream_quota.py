"""How many event streams one caller may hold open at once.

Every SSE response (``POST /message`` with ``stream: true``, ``GET /task/events``) takes a
slot of its caller before anything starts, and gives it back when the response ends, however
it ends. A caller at ``[server.settings] max_event_streams_per_caller`` gets 429 with
``Retry-After`` instead, and no task is started. (Each open stream holds a connection, a file
descriptor and a buffer of up to ``sse_max_buffer_bytes``: without a bound one user held 500.)
"""

from __future__ import annotations

from fastapi import HTTPException

RETRY_AFTER_SECONDS = 5


class StreamSlot:
    """One caller's hold on one stream; `release` is idempotent."""

    def __init__(self, slots: StreamSlots, owner: tuple[str, str]) -> None:
        self._slots = slots
        self._owner = owner
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots._release(self._owner)


class StreamSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0 = no bound
        self._open: dict[tuple[str, str], int] = {}

    def open_for(self, role: str, caller_id: str) -> int:
        return self._open.get((role, caller_id), 0)

    def acquire(self, role: str, caller_id: str) -> StreamSlot:
        owner = (role, caller_id)
        held = self._open.get(owner, 0)
        if self.limit and held >= self.limit:
            raise HTTPException(
                429,
                f"you already have {held} event streams open, the most one caller may hold "
                f"([server.settings] max_event_streams_per_caller = {self.limit}); close one "
                "or retry later",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self._open[owner] = held + 1
        return StreamSlot(self, owner)

    def _release(self, owner: tuple[str, str]) -> None:
        left = self._open.get(owner, 0) - 1
        if left > 0:
            self._open[owner] = left
        else:
            self._open.pop(owner, None)
