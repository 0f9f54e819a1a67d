"""What each task of the SQLite store holds, counted from the rows it writes (issue 40).

A finished task's size (`TaskLifecycle.task_bytes`: the bytes of its content columns, as
`length(CAST(column AS BLOB))` sums them) used to be read back with a query over its rows
in six tables, for every task that finished. The store already has every value it writes
as text, so it counts them as their batches commit:

- an event adds the UTF-8 length of its data; a history, the answer, a queue or journal row
  replace the length of their row (a queue delete makes it 0);
- the record's metadata is merged in SQL (`mail_merge`), so its length is read back in the
  batch's transaction, with the task's rowid: a row whose rowid is above the largest one
  before the batch was inserted by it. Only such tasks are counted (*tracked*): the runtime
  writes a new task's record before anything else of it, so a task whose record this store
  inserted has no row the store did not see. A task that was in the file before (resumed
  after a restart, brought back after it was let go) is not tracked: its size is queried.

A tracked task stops being tracked when something else changes its rows (its summary is
saved into its record, it is pruned) and past
`MAX_TRACKED` tasks (oldest first); it is then measured by the query again. Fenced writes
are not counted (only the writes the transaction kept are). Counting runs
on the connection's thread, inside the batch's transaction; the counts change only once the
transaction committed (`TaskSizes.commit`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from mail.store.lifecycle import JOURNAL_SUFFIX
from mail.store.sql_batch import SqlWrite

MAX_TRACKED = 100_000  # tasks whose sizes are kept (a few hundred bytes each)

# (swarm_name, caller_role, caller_id, task_id)
TaskRef = tuple[str, str, str, str]

_METADATA_SQL = """
    SELECT swarm_name, caller_role, caller_id, task_id, rowid, length(CAST(metadata AS BLOB))
    FROM tasks WHERE task_id IN (SELECT value FROM json_each(?))"""
_JOURNAL_LEN = len(JOURNAL_SUFFIX)


def text_bytes(value: Any) -> int:
    """What `length(CAST(value AS BLOB))` gives for a text value SQLite stores (None: 0)."""
    if type(value) is not str:
        return 0 if value is None else len(str(value).encode())
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


class _Size:
    """One tracked task: its events' bytes, its metadata's, and its replaced rows'."""

    __slots__ = ("events", "metadata", "rows")

    def __init__(self) -> None:
        self.events = 0
        self.metadata = 0
        self.rows: dict[tuple[str, str], int] = {}  # ("h", agent) / ("q", key) / ("r", "")

    def total(self) -> int:
        return self.events + self.metadata + sum(self.rows.values())


class BatchSizes:
    """What one batch adds to its tasks' sizes, before and after its statements run."""

    __slots__ = ("events", "rows", "records", "inserted", "metadata", "_top")

    def __init__(self) -> None:
        self.events: dict[TaskRef, int] = {}
        self.rows: dict[TaskRef, dict[tuple[str, str], int]] = {}
        self.records: set[TaskRef] = set()  # the records the batch wrote
        self.inserted: set[TaskRef] = set()
        self.metadata: dict[TaskRef, int] = {}
        self._top = 0

    def add(self, writes: Iterable[SqlWrite]) -> None:
        # Runs for every batch on the loop's thread (most batches are written there): one
        # pass, events (9 a request) first and inlined.
        events = self.events
        rows = self.rows
        for write in writes:
            kind = write.kind
            args = write.args
            if kind == "event":
                ref = args[:4]
                data = args[5]
                size = len(data) if type(data) is str and data.isascii() else text_bytes(data)
                events[ref] = events.get(ref, 0) + size
            elif kind == "task":
                self.records.add(args[:4])
            elif kind == "queue" or kind == "queue_delete":
                key = args[3]
                owner = key[:-_JOURNAL_LEN] if key.endswith(JOURNAL_SUFFIX) else key
                size = text_bytes(args[4]) if kind == "queue" else 0
                rows.setdefault((*args[:3], owner), {})[("q", key)] = size
            elif kind == "history":
                rows.setdefault(args[:4], {})[("h", args[4])] = text_bytes(args[6])
            elif kind == "response":
                rows.setdefault(args[:4], {})[("r", "")] = text_bytes(args[4])

    def before(self, conn: sqlite3.Connection) -> None:
        """In the transaction, before the batch's statements: the largest rowid so far."""
        if self.records:
            self._top = conn.execute("SELECT max(rowid) FROM tasks").fetchone()[0] or 0

    def after(self, conn: sqlite3.Connection) -> None:
        """In the transaction, after the statements: the metadata lengths of the records
        the batch wrote, and which of them it inserted (one query for the whole batch; a
        task id is the key's first column, rows of other instances are skipped)."""
        if not self.records:
            return
        records = self.records
        ids = json.dumps(sorted({ref[3] for ref in records}))
        for row in conn.execute(_METADATA_SQL, (ids,)):
            ref = row[:4]
            if ref in records:
                self.metadata[ref] = int(row[5] or 0)
                if row[4] > self._top:
                    self.inserted.add(ref)


class TaskSizes:
    """The sizes of the tasks a SQLite store inserted (see the module's docstring)."""

    def __init__(self, max_tracked: int = MAX_TRACKED) -> None:
        self.max_tracked = max_tracked
        self._sizes: dict[TaskRef, _Size] = {}

    def __len__(self) -> int:
        return len(self._sizes)

    def batch(self, writes: Sequence[SqlWrite]) -> BatchSizes:
        sizes = BatchSizes()
        sizes.add(writes)
        return sizes

    def commit(self, batch: BatchSizes) -> None:
        """The batch's transaction committed: count what it wrote."""
        tracked = self._sizes
        for ref in batch.inserted:
            if ref not in tracked:
                tracked[ref] = _Size()
        for ref, size in batch.events.items():
            entry = tracked.get(ref)
            if entry is not None:
                entry.events += size
        for ref, rows in batch.rows.items():
            entry = tracked.get(ref)
            if entry is not None:
                entry.rows.update(rows)
        for ref, size in batch.metadata.items():
            entry = tracked.get(ref)
            if entry is not None:
                entry.metadata = size
        excess = len(tracked) - self.max_tracked
        if excess > 0:  # the oldest go (dicts keep insertion order)
            for ref in list(_first(tracked, excess)):
                del tracked[ref]

    def known(self, instance: tuple[str, str, str], task_ids: Iterable[str]) -> dict[str, int]:
        """task_id -> bytes of the tracked ones among `task_ids`."""
        tracked = self._sizes
        out: dict[str, int] = {}
        for task_id in task_ids:
            entry = tracked.get((*instance, task_id))
            if entry is not None:
                out[task_id] = entry.total()
        return out

    def forget(self, instance: tuple[str, str, str], task_ids: Iterable[str]) -> None:
        """Their rows change outside the store's batches: measured by a query from now on."""
        for task_id in task_ids:
            self._sizes.pop((*instance, task_id), None)


def _first(mapping: dict[TaskRef, _Size], count: int) -> Iterable[TaskRef]:
    for number, ref in enumerate(mapping):
        if number >= count:
            return
        yield ref
