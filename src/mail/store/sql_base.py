"""What the two SQL stores (PostgreSQL, SQLite) share: write-behind, encoding, fencing rules.

Each write method validates and JSON-encodes its arguments (so a bad value fails in the
caller, before it is acknowledged), then hands a small `SqlWrite` to a `WriteBehindBuffer`.
Agent histories are the exception: a history is saved whole after every turn and grows with
the task, so encoding each save at once costs O(turns^2) (a 1000-turn task with 12 kB messages
took 85 s and 1.8 GB instead of 1.8 s on the memory store). A history write keeps the
runtime's snapshot (the list and a copy of each message's fields) and is encoded when its
batch is applied, after later saves of the same row in the batch replaced it. A task's queue
row (a running task's journal, rewritten several times per turn; a paused task's stashed
queue) is deferred the same way: most saves are replaced before their batch is written.
The buffer's worker gives batches to the subclass's `_apply_batch`, which applies each in
one transaction; see `mail.store.writer` for the guarantees. A subclass supplies the
connection handling, the SQL dialect (`_json`, `_text`, `_start_time`) and the reads.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mail.store.base import (
    TASK_FIELDS,
    InstanceKey,
    InstanceSnapshot,
    StoreUnavailableError,
    TaskStore,
    detect_tool_format,
    normalize_event,
    split_task_record,
)
from mail.store.writer import WriteBehindBuffer

logger = logging.getLogger("mail.store")

WRITE_KINDS = ("task", "event", "history", "response", "queue", "queue_delete")


@dataclass(frozen=True, slots=True)
class SqlWrite:
    kind: str  # one of WRITE_KINDS
    args: tuple[Any, ...]  # starts with swarm_name, caller_role, caller_id
    generation: int | None = None  # the lease it was made under; None: not fenced
    weight: int = 1  # how many writes it stands for (coalesced saves of one row)

    def row_identity(self) -> tuple[Any, ...] | None:
        """The row a write replaces whole (None: it merges or appends).

        A history is keyed by (swarm, role, id, task, agent); a task's queue by (swarm,
        role, id, task), for saves and deletes alike.
        """
        if self.kind == "history":
            return ("history", *self.args[:5])
        if self.kind in ("queue", "queue_delete"):
            return ("queue", *self.args[:4])
        return None


# (key, generation, dropped count, current generation) for a lease found superseded.
FencedLease = tuple[InstanceKey, int, int, int | None]


def key_args(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)


def coalesce_writes(batch: Sequence[SqlWrite]) -> list[SqlWrite]:
    """Drop whole-row saves that a later write of the same row in this batch replaces.

    A batch is one transaction, so the rows it leaves are exactly those of applying every
    write in order: only the last save (or delete) of a history or a queue matters. The
    survivor's `weight` counts the writes it stands for (fencing counts dropped writes).
    Outbox items are unpacked first (see "transactional outbox" below). One pass from the
    end (this runs for every batch, on the event loop).
    """
    kept: list[SqlWrite] = []  # in reverse order until the end
    survivors: dict[tuple[Any, ...], list[int]] = {}  # row -> [index in kept, weight]
    for write in _reversed_unpacked(batch):
        kind = write.kind
        if kind == "history":
            identity: tuple[Any, ...] = (True, write.args[:5])
        elif kind == "queue" or kind == "queue_delete":
            identity = (False, write.args[:4])
        else:
            kept.append(write)
            continue
        survivor = survivors.get(identity)
        if survivor is None:
            survivors[identity] = [len(kept), write.weight]
            kept.append(write)
        else:
            survivor[1] += write.weight
    for index, weight in survivors.values():
        write = kept[index]
        if weight != write.weight:
            kept[index] = SqlWrite(write.kind, write.args, write.generation, weight)
    kept.reverse()
    return kept


def _reversed_unpacked(batch: Sequence[SqlWrite]) -> Iterator[SqlWrite]:
    for write in reversed(batch):
        if write.kind == OUTBOX_KIND:
            yield from reversed(write.args)
        else:
            yield write


# -- transactional outbox (push delivery, mail.webhooks) ------------------------------------
# A write that causes push deliveries (a task event, a task's answer) is queued together with
# its outbox rows (`webhook_event`, one per webhook event; see store/webhooks_schema.py) as ONE
# buffer item of kind "outbox" whose args are the member writes. A batch is one transaction
# and an item is never split across batches, nor across the one-by-one retries of a batch the
# database rejected, so the rows commit exactly when their cause does (a kill -9 loses both or
# neither). `coalesce_writes` unpacks the items before anything else looks at the batch.
OUTBOX_KIND = "outbox"  # besides WRITE_KINDS, with its members of kind "webhook_event"


def unpack_outbox(batch: Sequence[SqlWrite]) -> Sequence[SqlWrite]:
    """The batch with each outbox item replaced by its member writes, in order."""
    if not any(w.kind == OUTBOX_KIND for w in batch):
        return batch
    writes: list[SqlWrite] = []
    for write in batch:
        if write.kind == OUTBOX_KIND:
            writes.extend(write.args)
        else:
            writes.append(write)
    return writes


def outbox_item(cause: SqlWrite, key: InstanceKey, rows: Sequence[tuple[Any, ...]]) -> SqlWrite:
    """`cause` and its outbox rows ((event_id, task_id, type, payload, created_at) each) as
    one buffer item; the rows carry the cause's generation (fenced together)."""
    members = [SqlWrite("webhook_event", (*key_args(key), *row), cause.generation) for row in rows]
    return SqlWrite(OUTBOX_KIND, (cause, *members), cause.generation)


# -- end of the transactional outbox ---------------------------------------------------------


# Writes whose last argument is kept as the caller's snapshot and encoded when applied.
DEFERRED_KINDS = ("history", "queue")


def encode_deferred(writes: Sequence[SqlWrite], encode: Callable[[Any], str]) -> list[SqlWrite]:
    """The batch with its deferred writes' snapshots encoded (see the module's docstring).

    A history or queue that cannot be encoded is logged and left out; the rest of the batch
    goes on.
    """
    encoded: list[SqlWrite] = []
    for write in writes:
        if write.kind in DEFERRED_KINDS and not isinstance(write.args[-1], str):
            try:
                text = encode(write.args[-1])
            except (TypeError, ValueError) as exc:
                what = "agent history" if write.kind == "history" else "task queue"
                logger.error(
                    "%s of %s not stored, it cannot be encoded as JSON: %s",
                    what,
                    "/".join(str(a) for a in write.args[3:-1] if isinstance(a, str)),
                    exc,
                )
                continue
            write = replace(write, args=(*write.args[:-1], text))
        encoded.append(write)
    return encoded


def leased_keys(writes: Sequence[SqlWrite]) -> list[tuple[str, str, str]]:
    """The (swarm, role, id) of the fenced writes of a batch, sorted (lock order)."""
    return sorted({w.args[:3] for w in writes if w.generation is not None})


def split_fenced(
    writes: Sequence[SqlWrite], current: Mapping[tuple[Any, ...], int]
) -> tuple[list[SqlWrite], list[FencedLease]]:
    """Keep the writes whose generation is the current one; count the others per lease."""
    kept: list[SqlWrite] = []
    dropped: dict[tuple[Any, ...], int] = {}
    for write in writes:
        if write.generation is None or current.get(write.args[:3]) == write.generation:
            kept.append(write)
        else:
            lease = (*write.args[:3], write.generation)
            dropped[lease] = dropped.get(lease, 0) + write.weight
    return kept, [
        (InstanceKey(*lease[:3]), lease[3], count, current.get(lease[:3]))
        for lease, count in dropped.items()
    ]


def runs_by_kind(writes: Sequence[SqlWrite]) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """The writes of each kind as one group (for executemany), in their order within the
    kind, kinds in the order of their first write.

    Regrouping is safe in one transaction: each kind writes its own table, its writes keep
    their order (event sequence, merges of one task record), and after `coalesce_writes` a
    queue row has one write left (a save or a delete), so writes of different kinds never
    touch one row. One executemany per kind instead of one per run: a batch of a few
    requests interleaves its kinds some 50 times.
    """
    groups: dict[str, list[tuple[Any, ...]]] = {}
    for write in writes:
        rows = groups.get(write.kind)
        if rows is None:
            groups[write.kind] = [write.args]
        else:
            rows.append(write.args)
    yield from groups.items()


# The argument of each kind that holds its content (the bulk of a batch's bytes).
_CONTENT_ARG: dict[str, int] = {"event": 5, "webhook_event": 6}


def batch_bytes(writes: Sequence[SqlWrite]) -> int:
    """About how many bytes an encoded batch writes (its content columns)."""
    size = 0
    for write in writes:
        value = write.args[_CONTENT_ARG.get(write.kind, -1)]
        if type(value) is str:
            size += len(value)
    return size


def task_from_row(row: Mapping[str, Any], start_time: Callable[[Any], str]) -> dict[str, Any]:
    """A task record from a `tasks` row (metadata merged in, JSON list columns decoded)."""
    record: dict[str, Any] = {}
    metadata = row["metadata"]
    if metadata:
        record.update(json.loads(metadata))
    for name in TASK_FIELDS:
        value = row[name]
        if name in ("task_contributors", "remote_swarms"):
            value = json.loads(value) if value is not None else []
        elif name in ("is_running", "completed") and value is not None:
            value = bool(value)
        elif name == "start_time" and value is not None:
            value = start_time(value)
        record[name] = value
    return record


def batch_statements(
    writes: Sequence[SqlWrite], current: Mapping[tuple[Any, ...], int], sql: Mapping[str, str]
) -> tuple[list[tuple[str, list[tuple[Any, ...]]]], list[FencedLease]]:
    """What one batch executes, given the current generations of its fenced keys: (statement,
    rows) pairs for executemany, in order, and the leases found superseded. `writes` are
    already coalesced and encoded (`coalesce_writes`, `encode_deferred`)."""
    kept, fenced = split_fenced(writes, current)
    return [(sql[kind], rows) for kind, rows in runs_by_kind(kept)], fenced


def add_snapshot_row(
    snapshot: InstanceSnapshot,
    table: str,
    row: Mapping[str, Any],
    start_time: Callable[[Any], str],
) -> None:
    """Put one row of a read of `table` into a snapshot (`start_time`: the dialect's
    start_time column value as ISO 8601 text)."""
    task_id = row["task_id"]
    if table == "tasks":
        snapshot.tasks[task_id] = task_from_row(row, start_time)
    elif table == "task_events":
        snapshot.events.setdefault(task_id, []).append(
            {"event": row["event_type"], "data": row["event_data"], "id": row["event_id"]}
        )
    elif table == "agent_histories":
        snapshot.histories[(task_id, row["agent_name"])] = json.loads(row["history"])
    elif table == "task_responses":
        snapshot.responses[task_id] = json.loads(row["response"])
    elif table == "task_queues":
        snapshot.queues[task_id] = json.loads(row["items"])
    else:  # pragma: no cover - our own constant list
        raise ValueError(f"unknown table {table}")


_TASK_COLUMNS = (
    "task_id, task_owner, task_contributors, remote_swarms, is_running, completed, title,"
    " start_time, metadata"
)
# What `load_instance` reads besides tasks: table -> columns, in the order rows come back.
_SNAPSHOT_READS: tuple[tuple[str, str, str], ...] = (
    ("task_events", "task_id, event_type, event_data, event_id", " ORDER BY seq"),
    ("agent_histories", "task_id, agent_name, history", ""),
    ("task_responses", "task_id, response", ""),
    ("task_queues", "task_id, items", ""),
)


def snapshot_queries(instance: str, task_order: str) -> tuple[tuple[str, str], ...]:
    """(table, SELECT) pairs that read one instance for `load_instance`, tasks first.

    `instance` is the dialect's condition on the three key columns, `task_order` the
    ORDER BY of the tasks (start time, then insertion order).
    """
    return (
        ("tasks", f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {instance} ORDER BY {task_order}"),
        *(
            (table, f"SELECT {columns} FROM {table} WHERE {instance}{order}")
            for table, columns, order in _SNAPSHOT_READS
        ),
    )


class BufferedSqlStore(TaskStore):
    """A TaskStore whose writes go through one write-behind buffer to a SQL database."""

    def __init__(
        self,
        *,
        name: str,
        is_transient: Callable[[BaseException], bool],
        max_batch: int,
        batch_delay: float,
        retry_initial: float,
        retry_max: float,
        max_pending: int,
        close_timeout: float,
        read_timeout: float,
    ) -> None:
        super().__init__()
        self._is_transient = is_transient
        self._close_timeout = close_timeout
        self._read_timeout = read_timeout
        self._buffer: WriteBehindBuffer[SqlWrite] = WriteBehindBuffer(
            self._apply_batch,
            is_transient=is_transient,
            max_batch=max_batch,
            max_delay=batch_delay,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_pending=max_pending,
            name=name,
        )
        # The TaskStore write methods by name, as `write_nowait` takes them.
        self._builders: dict[str, Callable[..., SqlWrite | None]] = {
            "upsert_task": self._task_write,
            "append_event": self._event_write,
            "save_history": self._history_write,
            "save_response": self._response_write,
            "save_queue": self._queue_write,
            "delete_queue": self._queue_delete_write,
            "outbox_write": self._outbox_write,  # transactional outbox (see outbox_item)
        }

    # -- what a dialect supplies ---------------------------------------------------------
    @abc.abstractmethod
    def _json(self, value: Any) -> str:
        """JSON text the database accepts for a JSON column."""

    @abc.abstractmethod
    def _text(self, value: Any) -> str | None:
        """A text column value (None stays None)."""

    @abc.abstractmethod
    def _start_time(self, iso: str) -> Any:
        """The database's value for a normalised ISO 8601 start time."""

    @abc.abstractmethod
    async def _apply_batch(self, batch: Sequence[SqlWrite]) -> None:
        """Apply writes in one transaction (fencing included); raise to retry."""

    @abc.abstractmethod
    async def _read_instance(self, key: InstanceKey) -> InstanceSnapshot: ...

    @abc.abstractmethod
    async def _release(self) -> None:
        """Close connections (after the buffer was flushed)."""

    # -- lifecycle -------------------------------------------------------------------------
    async def close(self) -> None:
        lost = await self._buffer.close(self._close_timeout)
        if lost:
            logger.error("closing the %s store with %d unwritten write(s)", self.backend, lost)
        await self._release()

    async def flush(self, timeout: float | None = None) -> bool:
        if self._buffer.pending and not self._buffer.running:
            return False
        return await self._buffer.flush(timeout)

    # -- writes ----------------------------------------------------------------------------
    # Each write is built by a synchronous `_<kind>_write` (checked and encoded in the
    # caller), then queued: awaited by the TaskStore methods, at once
    # by `write_nowait` (the runtime's StoreObserver: no task switch per write).
    def _task_write(self, key: InstanceKey, record: Mapping[str, Any]) -> SqlWrite | None:
        columns, extra = split_task_record(record, copy=False)  # encoded just below
        start_time = columns.get("start_time")
        contributors = columns.get("task_contributors")
        remote = columns.get("remote_swarms")
        flags = (columns.get("is_running"), columns.get("completed"))
        args = (
            *key_args(key),
            columns["task_id"],
            self._text(columns.get("task_owner")),
            None if contributors is None else self._json(contributors),
            None if remote is None else self._json(remote),
            *flags,
            self._text(columns.get("title")),
            None if start_time is None else self._start_time(start_time),
            self._json(extra),
        )
        return self._write(key, "task", args)

    def _event_write(self, key: InstanceKey, task_id: str, event: Any) -> SqlWrite | None:
        ev = normalize_event(event)
        text = self._text
        args = (*key_args(key), task_id, text(ev["event"]), text(ev["data"]), text(ev["id"]))
        return self._write(key, "event", args)

    def _history_write(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> SqlWrite | None:
        # Encoded when its batch is applied (module docstring); each message is copied, so a
        # later change to one of its fields does not reach this save.
        snapshot = [dict(m) if isinstance(m, dict) else m for m in history]
        fmt = tool_format or detect_tool_format(snapshot)
        args = (*key_args(key), task_id, agent_name, fmt, snapshot)
        return self._write(key, "history", args)

    def _response_write(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> SqlWrite | None:
        return self._write(key, "response", (*key_args(key), task_id, self._json(dict(response))))

    def _queue_write(
        self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]
    ) -> SqlWrite | None:
        # Encoded when its batch is applied, as a history (module docstring).
        snapshot = [dict(i) if isinstance(i, dict) else i for i in items]
        return self._write(key, "queue", (*key_args(key), task_id, snapshot))

    def _queue_delete_write(self, key: InstanceKey, task_id: str) -> SqlWrite | None:
        return self._write(key, "queue_delete", (*key_args(key), task_id))

    def _outbox_write(
        self, key: InstanceKey, method: str, args: tuple[Any, ...], rows: list[tuple[Any, ...]]
    ) -> SqlWrite | None:
        cause = self._builders[method](key, *args)
        return None if cause is None else outbox_item(cause, key, rows)

    async def outbox_write(
        self, key: InstanceKey, method: str, args: tuple[Any, ...], rows: list[tuple[Any, ...]]
    ) -> None:
        """`await self.<method>(key, *args)` and the outbox `rows`, in one transaction."""
        await self._submit(self._outbox_write(key, method, args, rows))

    def _write(self, key: InstanceKey, kind: str, args: tuple[Any, ...]) -> SqlWrite | None:
        generation = self._fencing.generation_for(key)
        if generation is not None and self._fencing.drop_if_known_fenced(key, generation):
            return None
        return SqlWrite(kind, args, generation)

    def write_nowait(self, key: InstanceKey, method: str, *args: Any) -> bool:
        """Queue the write `await self.<method>(key, *args)` would make, without awaiting.

        Returns False, writing nothing, while the buffer is full (the caller then awaits the
        method, which waits for room). A bad value raises here, as in the method.
        """
        if self._buffer.full:
            return False
        write = self._builders[method](key, *args)
        if write is not None:
            self._buffer.put_nowait(write)
        return True

    async def upsert_task(self, key: InstanceKey, record: Mapping[str, Any]) -> None:
        await self._submit(self._task_write(key, record))

    async def append_event(self, key: InstanceKey, task_id: str, event: Any) -> None:
        await self._submit(self._event_write(key, task_id, event))

    async def save_history(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> None:
        await self._submit(self._history_write(key, task_id, agent_name, tool_format, history))

    async def save_response(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> None:
        await self._submit(self._response_write(key, task_id, response))

    async def save_queue(self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]) -> None:
        await self._submit(self._queue_write(key, task_id, items))

    async def delete_queue(self, key: InstanceKey, task_id: str) -> None:
        await self._submit(self._queue_delete_write(key, task_id))

    async def _submit(self, write: SqlWrite | None) -> None:
        if write is not None:
            await self._buffer.submit(write)

    def _count_fenced(self, fenced: Sequence[FencedLease]) -> None:
        # Called only once the transaction committed (a failed batch is retried whole).
        for key, generation, count, now_current in fenced:
            self._fencing.dropped(key, generation, count, now_current)

    # -- reads -----------------------------------------------------------------------------
    async def load_instance(self, key: InstanceKey) -> InstanceSnapshot:
        # Read-your-writes: what was acknowledged for this instance must be visible.
        if not await self.flush(self._read_timeout):
            raise StoreUnavailableError(
                f"pending writes could not be stored within {self._read_timeout:.0f}s "
                f"(last error: {self._buffer.last_error})"
            )
        try:
            async with asyncio.timeout(self._read_timeout):
                return await self._read_instance(key)
        except Exception as exc:
            if self._is_transient(exc):
                raise StoreUnavailableError(
                    f"cannot read from {self.backend}: {type(exc).__name__}: {exc}"
                ) from exc
            raise

    # -- health ----------------------------------------------------------------------------
    @property
    def pending_writes(self) -> int:
        return self._buffer.pending

    @property
    def failed_attempts(self) -> int:
        return self._buffer.failed_attempts

    @property
    def last_error(self) -> str | None:
        return self._buffer.last_error

    @property
    def dropped_writes(self) -> int:
        return self._buffer.dropped

    def is_degraded(self) -> bool:
        return self._buffer.outage_since is not None

    def status(self) -> dict[str, Any]:
        status = super().status()
        status["dropped_writes"] = self._buffer.dropped
        return status
