"""What a caller's tasks store, booked as it is recorded ([server.store] max_stored_bytes_per_caller)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from mail.core.events import TaskEvent, compact_json


class Ledger(Protocol):
    """The caller's books, as the server keeps them (`finished_tasks.CallerLedger`)."""

    def book(self, task_id: str, size: int) -> None:
        """`size` more bytes stored for the task (negative: fewer)."""

    def book_team(self, size: int) -> None:
        """`size` more bytes of team data (posts, inbox entries, attachments)."""

    def refusal(self, size: int) -> str | None:
        """Why storing `size` more bytes would pass the caller's bound (None: it fits)."""


def text_bytes(value: Any) -> int:
    """The UTF-8 bytes of a JSON-like value as the store keeps it (compact JSON)."""
    try:
        return utf8_length(compact_json(value))
    except (RecursionError, ValueError, TypeError):  # nested deeper than the encoder goes
        return _walked_bytes(value)


def utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _walked_bytes(value: Any) -> int:
    """The bytes of the text in a value, walked with a loop (no recursion)."""
    size = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            size += utf8_length(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        else:
            size += len(str(item))
    return size


def event_bytes(event: TaskEvent) -> int:
    """What the store keeps of an event (`TaskEvent.store_data`, which keeps the text it
    made for the store's write)."""
    return utf8_length(event.store_data())


class TaskFiles:
    """What an action of one task may store beside it: the bound to check, and its files.

    Set around every action call (`storing_for`); the stdlib file actions and the team
    tools that write into the caller's folder read it (`current_task_files`)."""

    __slots__ = ("stored", "task", "changed")

    def __init__(self, stored: StoredBytes, task: Any, changed: Callable[[Any], None]) -> None:
        self.stored = stored
        self.task = task  # the MAILTask
        self.changed = changed  # the observer's task_changed: its record is written again

    def refusal(self, size: int) -> str | None:
        return self.stored.refusal(size)

    def file_written(self, path: str, stat: os.stat_result) -> None:
        """A file at `path` (absolute) now holds what `stat` says: the task keeps it (it is
        removed with the task, unless it changed since) and its bytes are booked."""
        files: dict[str, list[int]] = self.task.files
        before = files.get(path)
        files[path] = [stat.st_size, stat.st_mtime_ns]
        self.stored.book(self.task.task_id, stat.st_size - (before[0] if before else 0))
        self.changed(self.task)


current_task_files: ContextVar[TaskFiles | None] = ContextVar("mail_task_files", default=None)


class StoredBytes:
    """A runtime's side of its caller's books: sizes what the runtime records, books it."""

    __slots__ = ("ledger", "_sized")

    def __init__(self) -> None:
        self.ledger: Ledger | None = None  # set by the server per instance
        # task id -> agent -> entries of its history booked so far
        self._sized: dict[str, dict[str, int]] = {}

    def book(self, task_id: str, size: int) -> None:
        if self.ledger is not None and size:
            self.ledger.book(task_id, size)

    def book_team(self, size: int) -> None:
        if self.ledger is not None and size > 0:
            self.ledger.book_team(size)

    def refusal(self, size: int) -> str | None:
        return None if self.ledger is None else self.ledger.refusal(size)

    def over_bound(self) -> str | None:
        """Why no further turn starts: the caller's books passed the bound already."""
        if self.ledger is None:
            return None
        why = self.ledger.refusal(0)
        return None if why is None else f"Task stopped: {why}"

    def event(self, event: TaskEvent) -> None:
        if self.ledger is not None:
            self.ledger.book(event.task_id, event_bytes(event))

    def response(self, task_id: str, response: Any) -> None:
        if self.ledger is not None:
            self.ledger.book(task_id, text_bytes(response))

    def begin_turn(self, task_id: str, agent: str, history: list[Any]) -> None:
        """A turn starts on `history`: what it holds already is booked or was measured
        (a task read back from the store) and is not booked again."""
        if self.ledger is not None:
            self._sized.setdefault(task_id, {}).setdefault(agent, len(history))

    def history(self, task_id: str, agent: str, history: list[Any]) -> None:
        """The entries `history` gained since it was last booked (entries are only added;
        a history made shorter, by compression, is booked again from where it now ends)."""
        if self.ledger is None:
            return
        sized = self._sized.setdefault(task_id, {})
        done = sized.get(agent)
        sized[agent] = len(history)
        if done is not None and done < len(history):
            self.ledger.book(task_id, sum(text_bytes(entry) for entry in history[done:]))

    def forget(self, task_id: str) -> None:
        self._sized.pop(task_id, None)

    @contextlib.contextmanager
    def storing_for(self, task: Any, changed: Callable[[Any], None]) -> Iterator[None]:
        """Around an action call of `task`: what it stores is checked and booked."""
        if task is None:
            yield
            return
        token = current_task_files.set(TaskFiles(self, task, changed))
        try:
            yield
        finally:
            current_task_files.reset(token)


__all__ = [
    "Ledger",
    "StoredBytes",
    "TaskFiles",
    "current_task_files",
    "event_bytes",
    "text_bytes",
    "utf8_length",
]
