"""What each caller keeps stored, and the per-caller bound on it ([server.store] quotas).

Every caller's stored tasks are counted here: the bytes each task keeps (its rows, the files
its actions wrote under ``[stdlib.fs]``, the outcomes of the idempotency keys that started
it; measured from the store when the task finishes and leaves memory, see `finished_tasks`)
and how many tasks there are, plus the caller's team data (threads, posts, inbox entries,
attachments). A caller's books are read from the store the first time it sends a message
after a (re)start. A running task's bytes are booked as its runtime records them
(`CallerLedger`, over `mail.core.stored_bytes`).

A message is refused with 429 when the caller already keeps `max_stored_tasks_per_caller`
tasks (a new task only) or when its stored bytes plus the message would pass
`max_stored_bytes_per_caller`. Within a task, an action or a team tool that would pass the
byte bound fails with `refusal`'s text, and a task whose caller passed it gets no further
agent turn. Another caller's books are never touched.

429, not 507 or 413: the limit is this caller's share (507 Insufficient Storage says the
server is out of room, a 5xx that clients and monitors read as a server fault; 413 says this
one request is too large, which it is not). Like the other per-caller bounds it is "too much
of this caller's own", and it clears when the caller's old tasks expire (finished_task_ttl).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException

from mail.server.instances import instance_kind

Owner = tuple[str, str]  # (instance kind, caller id)
# How often a caller's team data is measured again (its threads grow while its tasks run).
TEAM_MEASURE_INTERVAL = 10.0


def human_bytes(size: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - the loop returns


class TaskSizes(dict[str, int]):
    """task_id -> stored bytes, with their sum kept as entries change (`bytes`): the quota
    check runs on every message, and summing a caller's 10,000 tasks each time cost more
    than the rest of a request's work."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __setitem__(self, task_id: str, size: int) -> None:
        self.bytes += size - self.get(task_id, 0)
        super().__setitem__(task_id, size)

    def __delitem__(self, task_id: str) -> None:
        self.bytes -= self[task_id]
        super().__delitem__(task_id)

    def pop(self, task_id: str, default: Any = None) -> Any:  # type: ignore[override]
        if task_id in self:
            self.bytes -= self[task_id]
            return super().pop(task_id)
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for task_id, size in dict(*args, **kwargs).items():
            self[task_id] = size

    def setdefault(self, task_id: str, default: Any = None) -> Any:  # type: ignore[override]
        if task_id not in self:
            self[task_id] = default
        return self[task_id]

    def popitem(self) -> tuple[str, int]:
        task_id, size = super().popitem()
        self.bytes -= size
        return task_id, size

    def clear(self) -> None:
        super().clear()
        self.bytes = 0

    def __ior__(self, other: Any) -> TaskSizes:  # type: ignore[override, misc]
        self.update(other)
        return self


@dataclass
class CallerBooks:
    """One caller's stored tasks (task_id -> bytes) and team bytes."""

    tasks: TaskSizes = field(default_factory=TaskSizes)
    # memory store: when each task was seen finished (time.time()), for retention
    finished_at: dict[str, float] = field(default_factory=dict)
    team_bytes: int = 0
    team_measured: float = 0.0
    # Uploads of requests past the check and not yet stored (`reserve`): counted at once, so
    # uploads sent together cannot all pass the check before any is stored.
    reserved: int = 0
    read_at: float = 0.0  # time.monotonic() of the last read from the store (`reread`)

    @property
    def total(self) -> int:
        return self.tasks.bytes + self.team_bytes + self.reserved

    def seen(self) -> tuple[dict[str, int], int]:
        """What the books hold before a read from the store (`reread`'s `before`)."""
        return dict(self.tasks), self.team_bytes

    def reread(self, loaded: CallerBooks, before: tuple[dict[str, int], int]) -> None:
        """Take the tasks and team bytes of a new read from the store (what was removed
        outside this server, such as by `mail db-prune`, leaves the books); what only this
        server knows (uploads under way, finished_at) stays, and so does what changed here
        while the store was read (`before`, from `seen`): a task booked or measured then,
        one forgotten then, team bytes added then are newer than the read."""
        tasks, team_bytes = before
        fresh = dict(loaded.tasks)
        for task_id in tasks.keys() - self.tasks.keys():
            fresh.pop(task_id, None)
        for task_id, size in self.tasks.items():
            if tasks.get(task_id) != size:
                fresh[task_id] = size
        self.tasks.clear()
        self.tasks.update(fresh)
        if self.team_bytes == team_bytes:
            self.team_bytes, self.team_measured = loaded.team_bytes, loaded.team_measured
        self.read_at = loaded.read_at


class StorageQuota:
    """The books of every caller of one server, and the check a new message goes through."""

    def __init__(self, max_bytes: int, max_tasks: int) -> None:
        self.max_bytes = max_bytes  # 0 = no bound
        self.max_tasks = max_tasks
        self._books: dict[Owner, CallerBooks] = {}
        self._loading: dict[Owner, asyncio.Task[CallerBooks]] = {}

    def books(self, owner: Owner) -> CallerBooks | None:
        return self._books.get(owner)

    def all_books(self) -> dict[Owner, CallerBooks]:
        return self._books

    async def ensure(
        self, owner: Owner, load: Callable[[], Awaitable[CallerBooks]] | None = None
    ) -> CallerBooks:
        """The caller's books, read with `load` once (single-flight per caller)."""
        books = self._books.get(owner)
        if books is not None and (books.read_at or load is None):
            return books
        if load is None:
            books = self._books[owner] = CallerBooks()
            return books
        pending = self._loading.get(owner)
        if pending is None:
            pending = self._loading[owner] = asyncio.ensure_future(load())
        try:
            loaded = await asyncio.shield(pending)
        finally:
            if pending.done():
                self._loading.pop(owner, None)
        books = self._books.setdefault(owner, loaded)
        if books is not loaded and not books.read_at:
            # Booked here before the store was read (a task of the caller that ended before
            # its first message, such as one cancelled): what the store keeps counts too.
            books.reread(loaded, ({}, -1 if books.team_measured else books.team_bytes))
        return books

    def book(self, owner: Owner, task_id: str, size: int) -> None:
        """`size` bytes a task just stored (negative: gave back), on top of its figure."""
        tasks = self._books.setdefault(owner, CallerBooks()).tasks
        tasks[task_id] = max(0, tasks.get(task_id, 0) + int(size))

    def book_outcome(self, scope: Any, task_id: str, size: int) -> None:
        """A stored idempotency outcome (`scope`: the caller's key scope, an InstanceKey)
        of the key that started or continued `task_id`: the task's, as the store counts it."""
        self.book((instance_kind(scope.caller_role), scope.caller_id), task_id, size)

    def refusal(self, owner: Owner, size: int) -> str | None:
        """Why `size` more bytes would pass the caller's byte bound; None when they fit.
        With `size` 0: why the caller is past it already."""
        books = self._books.get(owner)
        total = books.total if books is not None else 0
        if not self.max_bytes or total + size <= self.max_bytes:
            return None
        taken, bound = human_bytes(total), human_bytes(self.max_bytes)
        if size:
            head = (
                f"it would store {human_bytes(size)} more; your tasks, files and team data "
                f"take {taken} of the {bound} one caller may store"
            )
        else:
            head = (
                f"your tasks, files and team data take {taken}, more than the {bound} one "
                "caller may store"
            )
        return (
            f"{head} ([server.store] max_stored_bytes_per_caller = {self.max_bytes}); {_freed_by()}"
        )

    def record(
        self, owner: Owner, task_id: str, size: int, finished_at: float | None = None
    ) -> None:
        books = self._books.setdefault(owner, CallerBooks())
        books.tasks[task_id] = max(0, int(size))
        if finished_at is not None:
            books.finished_at[task_id] = finished_at

    def set_team(self, owner: Owner, size: int) -> None:
        books = self._books.setdefault(owner, CallerBooks())
        books.team_bytes = max(0, int(size))
        books.team_measured = time.monotonic()

    def add_team(self, owner: Owner, size: int) -> None:
        """Team bytes just stored (a caller's uploads): counted at once, so uploads sent one
        after another cannot pass the bound between two measurements; the next measurement
        (`set_team`) replaces the figure with the store's."""
        books = self._books.setdefault(owner, CallerBooks())
        books.team_bytes += max(0, int(size))

    def reserve(self, owner: Owner, size: int) -> None:
        """Bytes a request that passed `check` is about to store: in the books until
        `unreserve` (a measurement of the team data, `set_team`, leaves them alone)."""
        books = self._books.setdefault(owner, CallerBooks())
        books.reserved += max(0, int(size))

    def unreserve(self, owner: Owner, size: int) -> None:
        books = self._books.get(owner)
        if books is not None:
            books.reserved = max(0, books.reserved - max(0, int(size)))

    def team_due(self, owner: Owner) -> bool:
        books = self._books.get(owner)
        return books is None or time.monotonic() - books.team_measured >= TEAM_MEASURE_INTERVAL

    def forget(self, owner: Owner, task_ids: Iterable[str]) -> None:
        books = self._books.get(owner)
        if books is None:
            return
        for task_id in task_ids:
            books.tasks.pop(task_id, None)
            books.finished_at.pop(task_id, None)

    def at_bound(self, books: CallerBooks) -> bool:
        """Whether the caller is at either bound, or within a tenth of the byte bound (its
        next message may be refused)."""
        if self.max_tasks and len(books.tasks) >= self.max_tasks:
            return True
        return bool(self.max_bytes) and books.total >= self.max_bytes - self.max_bytes // 10

    def check(
        self,
        owner: Owner,
        *,
        new_task: bool,
        incoming: int,
        open_ids: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        """429 when a message of `incoming` bytes (a new task or not) passes either bound;
        `open_ids` gives the caller's running and paused tasks (not yet in the books)."""
        if not (self.max_bytes or (new_task and self.max_tasks)):
            return
        books = self._books.get(owner) or CallerBooks()
        if new_task and self.max_tasks:
            count = len(books.tasks) + sum(1 for t in open_ids() if t not in books.tasks)
            if count >= self.max_tasks:
                raise HTTPException(
                    429,
                    f"you keep {count} stored tasks, the most one caller may keep "
                    f"([server.store] max_stored_tasks_per_caller = {self.max_tasks}); "
                    f"{_freed_by()}",
                )
        if self.max_bytes and books.total + incoming > self.max_bytes:
            raise HTTPException(
                429,
                f"you store {human_bytes(books.total)} in {len(books.tasks)} tasks, and this "
                f"message ({human_bytes(incoming)}) would pass the most one caller may store "
                f"([server.store] max_stored_bytes_per_caller = {self.max_bytes}); "
                f"{_freed_by()}",
            )


class CallerLedger:
    """One caller's books as its runtime sees them (`mail.core.stored_bytes.Ledger`)."""

    __slots__ = ("quota", "owner")

    def __init__(self, quota: StorageQuota, owner: Owner) -> None:
        self.quota = quota
        self.owner = owner

    def book(self, task_id: str, size: int) -> None:
        self.quota.book(self.owner, task_id, size)

    def book_team(self, size: int) -> None:
        self.quota.add_team(self.owner, size)

    def refusal(self, size: int) -> str | None:
        return self.quota.refusal(self.owner, size)


def _freed_by() -> str:
    return (
        "finished tasks are removed after [server.store] finished_task_ttl, or an operator "
        "can remove them with `mail db-prune`"
    )
