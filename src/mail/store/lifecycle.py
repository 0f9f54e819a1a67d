"""Finished tasks in a store: read back, listed, measured, removed when they expire."""

from __future__ import annotations

import abc
import datetime as _dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mail.store.base import InstanceKey, InstanceSnapshot, TaskStore

# States (the `state` a task record carries) of a task that neither runs nor waits.
FINISHED_STATES = ("completed", "failed", "stopped")
# The same, as a SQL list for the stores' `_FINISHED` conditions.
FINISHED_STATES_SQL = "(" + ", ".join(f"'{state}'" for state in FINISHED_STATES) + ")"
JOURNAL_SUFFIX = "::journal"  # a running task's journal row in task_queues (runtime_durable)
# Peers' answers to a task whose owner's instance was not loaded when they came (after a
# restart), kept until it is: `mail.server.parked_answers`.
PARKED_SUFFIX = "::parked"
# The tables that hold a task's rows (keyed by instance and task id), each with the column
# whose bytes count as the task's, `tasks` last. A name that is not a table of the database
# (missing, or a view over another layout) is skipped: a store keeps its events either one
# row each (task_events) or one row per written batch (task_event_batches).
TASK_CONTENT: dict[str, str] = {
    "task_events": "event_data",
    "task_event_batches": "event_texts",
    "agent_histories": "history",
    "task_responses": "response",
    "task_queues": "items",
    "tasks": "metadata",
}
TASK_TABLES = tuple(TASK_CONTENT)
# Tasks removed per transaction, and the stored bytes after which a batch stops early (a few
# large tasks make a batch of their own, so the writer is never held up for long).
PRUNE_BATCH = 50
PRUNE_BATCH_BYTES = 8 * 1024 * 1024

# A place in a task list, newest first: (start time as ISO 8601 UTC text, task id).
Cursor = tuple[str, str]


@dataclass
class PruneReport:
    """What a `prune` removed: tasks (by instance) and rows of the task and team tables, and
    the files the removed tasks wrote (path -> [size, mtime_ns]; the caller removes them:
    the store does not touch the file system, see `mail.core.file_root.remove_task_files`)."""

    tasks: list[tuple[InstanceKey, str]] = field(default_factory=list)
    rows: int = 0
    team_rows: int = 0
    batches: int = 0
    files: dict[str, Any] = field(default_factory=dict)

    def add(self, other: PruneReport) -> None:
        self.tasks.extend(other.tasks)
        self.rows += other.rows
        self.team_rows += other.team_rows
        self.batches += other.batches
        self.files.update(other.files)

    def add_files(self, listed: Any) -> None:
        """The `files` of a removed task's record (JSON text, or as decoded)."""
        if isinstance(listed, str | bytes):
            try:
                listed = json.loads(listed)
            except ValueError:
                return
        if isinstance(listed, dict):
            self.files.update(listed)


@dataclass
class SpaceReport:
    """How big the store's file is and how much of it is free (SQLite; zeros elsewhere)."""

    file_bytes: int = 0
    free_bytes: int = 0
    auto_vacuum: str = ""


def stored_summary(record: dict[str, Any]) -> dict[str, Any] | None:
    """The summary saved with a task record when it left memory (see `save_summary`)."""
    summary = record.get("summary")
    return summary if isinstance(summary, dict) else None


def record_is_finished(record: dict[str, Any]) -> bool:
    """Whether a stored task record is finished (the SQL `_finished` conditions, in Python)."""
    if record.get("is_running"):
        return False
    state = record.get("state")
    if isinstance(state, str):
        return state in FINISHED_STATES
    if record.get("completed"):
        return not (record.get("breakpoint_calls") or record.get("pending_reviews"))
    return True


def queue_keys(task_ids: Iterable[str]) -> list[str]:
    """The task_queues keys of tasks: their stashed queue, their journal and their parked
    answers (read, sized and removed with the task)."""
    ids = list(task_ids)
    return ids + [t + JOURNAL_SUFFIX for t in ids] + [t + PARKED_SUFFIX for t in ids]


def task_of_queue_key(key: str) -> str:
    for suffix in (JOURNAL_SUFFIX, PARKED_SUFFIX):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def cutoff_for(ttl: float, now: _dt.datetime | None = None) -> _dt.datetime:
    """The time before which a task that last changed is expired, for a TTL in seconds."""
    now = now or _dt.datetime.now(_dt.UTC)
    try:
        return now - _dt.timedelta(seconds=ttl)
    except OverflowError:  # a TTL longer than the calendar: nothing is that old
        return _dt.datetime.min.replace(tzinfo=_dt.UTC)


def batch_by_bytes(rows: Sequence[tuple[Any, ...]], size_index: int) -> list[tuple[Any, ...]]:
    """The first rows whose known sizes add up to `PRUNE_BATCH_BYTES` (at least one)."""
    total = 0
    for count, row in enumerate(rows):
        size = row[size_index]
        total += int(size) if isinstance(size, int | float) else 0
        if total >= PRUNE_BATCH_BYTES:
            return list(rows[: count + 1])
    return list(rows)


class TaskLifecycle(abc.ABC):
    """Reads, sizes and removal of stored tasks beside one `TaskStore`."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    async def _settle(self) -> None:
        # What was acknowledged must be visible (and removals must not race queued writes).
        await self.store.settle()

    @abc.abstractmethod
    async def records(
        self, key: InstanceKey, *, limit: int | None = None, before: Cursor | None = None
    ) -> dict[str, dict[str, Any]]:
        """task_id -> task record (as `load_instance` returns them, metadata merged in) with
        `event_count`: every task of the instance, oldest first; or, with `limit`, a page of
        the newest ones (newest first), before `before` (start time, task id) if given."""

    @abc.abstractmethod
    async def load_tasks(self, key: InstanceKey, task_ids: Sequence[str]) -> InstanceSnapshot:
        """Everything stored for these tasks of the instance (their journals included)."""

    @abc.abstractmethod
    async def owners(self, task_id: str) -> list[InstanceKey]:
        """The instances that have a task with this id (an operator's lookup)."""

    @abc.abstractmethod
    async def callers(self, swarm_name: str, caller_role: str) -> list[str]:
        """The ids of the callers of one role that have tasks stored for `swarm_name` (an
        operator's listing: the remote swarms whose instances left memory)."""

    @abc.abstractmethod
    async def running_callers(self, swarm_name: str, limit: int) -> list[InstanceKey]:
        """Up to `limit` instances of `swarm_name` that have a running task stored (state
        ``running``: not paused, not finished), the one with the oldest such task first (what
        a server resumes at start-up: `mail.server.instances`)."""

    @abc.abstractmethod
    async def save_summaries(self, key: InstanceKey, summaries: dict[str, dict[str, Any]]) -> None:
        """Keep each task's summary in its record (key `summary`), in one transaction; a task
        that is gone is skipped."""

    @abc.abstractmethod
    async def task_bytes(self, key: InstanceKey, task_ids: Sequence[str]) -> dict[str, int]:
        """task_id -> bytes its rows hold (the encoded content, without database overhead)."""

    @abc.abstractmethod
    async def _prune_batch(self, cutoff: _dt.datetime) -> PruneReport:
        """Remove up to one batch of tasks finished before `cutoff`, in one transaction."""

    async def prune(self, cutoff: _dt.datetime, *, max_batches: int | None = None) -> PruneReport:
        """Remove every task finished (and not changed since) before `cutoff`, batch by batch."""
        await self._settle()
        report = PruneReport()
        while max_batches is None or report.batches < max_batches:
            batch = await self._prune_batch(cutoff)
            if not batch.tasks:
                break
            report.add(batch)
        return report

    async def reclaim_space(self, max_pages: int | None = None) -> int:
        """Give freed space back to the file system; returns the bytes returned."""
        return 0

    async def space(self) -> SpaceReport:
        return SpaceReport()
