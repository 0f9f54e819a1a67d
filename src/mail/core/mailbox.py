"""The priority mailbox: five tiers, FIFO by enqueue sequence within a tier."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

from mail.core.message import MAILMessage

# Tier numbers: lower is served first (protocol tiers 1-5).
PRIORITY_SYSTEM = 1
PRIORITY_USER = 2
PRIORITY_AGENT_INTERRUPT = 3
PRIORITY_AGENT_BROADCAST = 4
PRIORITY_AGENT_MESSAGE = 5


def message_priority(message: MAILMessage) -> int:
    """Tier of a message: system, then admin/user, then agent interrupts, broadcasts, the rest."""
    sender_type = message["message"]["sender"]["address_type"]
    if sender_type == "system":
        return PRIORITY_SYSTEM
    if sender_type in ("admin", "user"):
        return PRIORITY_USER
    msg_type = message["msg_type"]
    if msg_type in ("interrupt", "broadcast_complete"):
        return PRIORITY_AGENT_INTERRUPT
    if msg_type == "broadcast":
        return PRIORITY_AGENT_BROADCAST
    return PRIORITY_AGENT_MESSAGE


class MailboxClosed(Exception):
    """Raised by `Mailbox.get` once the mailbox is closed and drained of waiters."""


QueueItem = tuple[int, int, MAILMessage]


class Mailbox:
    """A heap of (priority, seq, message) with an awaitable get and per-task stash/load."""

    def __init__(self) -> None:
        self._heap: list[QueueItem] = []
        self._seq = itertools.count()
        self._not_empty = asyncio.Event()
        # The loop `_not_empty` was last waited in: an asyncio.Event is bound to the first loop
        # that waits on it, and a swarm may be run by one asyncio.run after another.
        self._waited_in: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._wakeup = False
        self._per_task: dict[str, int] = {}
        # True while a consumer is blocked in `get` on an empty heap.
        self.consumer_waiting = False
        # A TaskJournal (mail.core.runtime_durable) while a store is attached, else None.
        self.journal: Any = None

    def __len__(self) -> int:
        return len(self._heap)

    def empty(self) -> bool:
        return not self._heap

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, message: MAILMessage, priority: int | None = None) -> None:
        if priority is None:
            priority = message_priority(message)
        seq = next(self._seq)
        heapq.heappush(self._heap, (priority, seq, message))
        if self.journal is not None:
            self.journal.queued(seq, priority, message)
        task_id = message["message"]["task_id"]
        self._per_task[task_id] = self._per_task.get(task_id, 0) + 1
        self._not_empty.set()

    def has_task(self, task_id: str) -> bool:
        return self._per_task.get(task_id, 0) > 0

    def _forget(self, message: MAILMessage) -> None:
        task_id = message["message"]["task_id"]
        count = self._per_task.get(task_id, 1) - 1
        if count <= 0:
            self._per_task.pop(task_id, None)
        else:
            self._per_task[task_id] = count

    def get_nowait(self) -> MAILMessage | None:
        if not self._heap:
            return None
        item = heapq.heappop(self._heap)
        if not self._heap:
            self._not_empty.clear()
        self._forget(item[2])
        if self.journal is not None:
            self.journal.popped(item[1], item[2])
        return item[2]

    async def get(self) -> MAILMessage | None:
        """Next message; None after `put_wakeup`; MailboxClosed once closed and empty."""
        while True:
            if self._heap:
                return self.get_nowait()
            if self._closed:
                raise MailboxClosed
            if self._wakeup:
                self._wakeup = False
                self._not_empty.clear()
                return None
            loop = asyncio.get_running_loop()
            if self._waited_in is not loop:
                if self._waited_in is not None:  # bound to an earlier loop: a new one here
                    was_set = self._not_empty.is_set()
                    self._not_empty = asyncio.Event()
                    if was_set:
                        self._not_empty.set()
                self._waited_in = loop
            self.consumer_waiting = True
            try:
                await self._not_empty.wait()
            finally:
                self.consumer_waiting = False

    def put_wakeup(self) -> None:
        """Make a pending `get` return None (used to stop a loop without closing)."""
        self._wakeup = True
        self._not_empty.set()

    def close(self) -> None:
        self._closed = True
        self._not_empty.set()

    def stash(self, task_id: str) -> list[dict[str, Any]]:
        """Remove and return the queued items of one task (kept in their order)."""
        if not self._per_task.get(task_id):
            return []
        kept: list[QueueItem] = []
        taken: list[QueueItem] = []
        for item in self._heap:
            (taken if item[2]["message"]["task_id"] == task_id else kept).append(item)
        if taken:
            heapq.heapify(kept)
            self._heap = kept
            if not kept:
                self._not_empty.clear()
        taken.sort()
        for item in taken:
            self._forget(item[2])
        if self.journal is not None:
            self.journal.stashed(task_id, [item[1] for item in taken])
        return [{"priority": p, "seq": s, "message": m} for p, s, m in taken]

    def load(self, items: list[dict[str, Any]]) -> None:
        """Put stashed items back; they keep their tier and relative order."""
        for item in sorted(items, key=lambda i: (i["priority"], i["seq"])):
            self.put(item["message"], item["priority"])

    def snapshot(self) -> list[MAILMessage]:
        return [item[2] for item in sorted(self._heap)]
