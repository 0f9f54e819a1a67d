"""The SQL stores' writes as a batch sees them: `SqlWrite`, and the pure functions that turn
a batch into what one transaction executes (coalescing, the transactional outbox's items,
deferred encoding, fencing, grouping by kind). `mail.store.base.TaskStore` queues them and runs
each batch in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mail.store.records import InstanceKey

logger = logging.getLogger("mail.store")

WRITE_KINDS = ("task", "event", "history", "response", "queue", "queue_delete")
# A task's events of one batch as one write: args (swarm, role, id, task_id, rows), each row
# the args of an "event" write (see "event runs" below). Written with the "event" statement.
EVENT_ROWS_KIND = "event_rows"
# A history's rows past its first segment, deleted by the transaction that writes a history
# whole (a "history" write of start 0): args (swarm, role, id, task_id, agent_name). Made by
# `runs_by_kind`, never queued.
HISTORY_TRIM_KIND = "history_trim"


@dataclass(slots=True)
class SqlWrite:
    """One write waiting in the buffer. Never changed once made (a changed write is a new
    one); not frozen only because a frozen dataclass costs 4x to make, and some 20 are made
    per request."""

    kind: str  # one of WRITE_KINDS
    args: tuple[Any, ...]  # starts with swarm_name, caller_role, caller_id
    generation: int | None = None  # the lease it was made under; None: not fenced
    weight: int = 1  # how many writes it stands for (coalesced saves of one row)
    # A task write: the keys of its metadata (what its merge into the record replaces);
    # None: not merged with other writes of its record (see `coalesce_writes`).
    merge_keys: frozenset[str] | None = None


# (key, generation, dropped count, current generation) for a lease found superseded.
FencedLease = tuple[InstanceKey, int, int, int | None]


def key_args(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)


def coalesce_writes(batch: Sequence[SqlWrite]) -> list[SqlWrite]:
    """Drop whole-row saves that a later write of the same row in this batch replaces.

    A batch is one transaction, so the rows it leaves are exactly those of applying every
    write in order: only the last save (or delete) of a history or a queue matters. The
    survivor's `weight` counts the writes it stands for (fencing counts dropped writes).
    Successive writes of one task record become one (`_merge_task`), at the place of the
    first (the order a one-by-one apply would insert rows in). Outbox items are
    unpacked first (see "transactional outbox" below). One pass from the end (this runs for
    every batch, on the event loop).
    """
    kept: list[SqlWrite | None] = []  # in reverse order until the end
    keep = kept.append
    # row -> [index in kept, weight]; a history's row is 5 arguments long, a queue's 4, so
    # the two never collide
    survivors: dict[tuple[Any, ...], list[int]] = {}
    # history -> its segments that the survivor must hold (newest first), until a whole
    # history (start 0) is met: earlier writes of it are superseded
    segments: dict[tuple[Any, ...], list[SqlWrite]] = {}
    # task record -> index in kept of its next write in the batch (merged ones included)
    tasks: dict[tuple[Any, ...], int] = {}
    moved = 0  # merged task writes moved to their earlier write's place (None left behind)
    writes: Iterable[SqlWrite] = reversed(batch)
    for write in batch:
        if write.kind == OUTBOX_KIND:
            writes = _reversed_unpacked(batch)
            break
    for write in writes:
        kind = write.kind
        if kind == "history":
            identity: tuple[Any, ...] = write.args[:5]
        elif kind == "queue" or kind == "queue_delete":
            identity = write.args[:4]
        else:
            if kind == "task":
                # Any write of the record, merged or not, is the next one an earlier write
                # may merge with: so nothing of the record sits between two merged writes.
                record = write.args[:4]
                index = tasks.get(record, -1)
                tasks[record] = len(kept)
                if index >= 0 and write.merge_keys is not None:
                    later = kept[index]
                    if (
                        later is not None
                        and later.generation == write.generation
                        and later.merge_keys is not None
                        and write.merge_keys <= later.merge_keys
                    ):
                        # At the earlier write's place: a row the batch inserts gets the
                        # rowid it would get one write at a time (SQLite lists tasks of
                        # one start time in rowid order).
                        kept[index] = None
                        moved += 1
                        write = _merge_task(write, later)
            keep(write)
            continue
        survivor = survivors.get(identity)
        if survivor is None:
            survivors[identity] = [len(kept), write.weight]
            keep(write)
            if kind == "history" and write.args[6]:  # a segment: earlier ones join it
                segments[identity] = [write]
        else:
            survivor[1] += write.weight
            parts = segments.get(identity)
            if parts is not None and kind == "history":
                parts.append(write)
                if not write.args[6]:  # the whole history: what came before is replaced
                    del segments[identity]
                    _merge_segments(kept, survivors[identity][0], parts)
    for identity, parts in segments.items():
        if len(parts) > 1:
            _merge_segments(kept, survivors[identity][0], parts)
    for index, weight in survivors.values():
        saved = kept[index]
        assert saved is not None  # only task writes are moved
        if weight != saved.weight:
            kept[index] = SqlWrite(
                saved.kind, saved.args, saved.generation, weight, saved.merge_keys
            )
    kept.reverse()
    if moved:
        return [write for write in kept if write is not None]
    return kept  # type: ignore[return-value]  # no None in it


def _merge_segments(kept: list[SqlWrite | None], index: int, parts: list[SqlWrite]) -> None:
    """Put at `kept[index]` one write of a history's successive writes of a batch (`parts`,
    newest first; the oldest may be the whole history, start 0): from the oldest's start,
    their messages in order. Each was made for its write alone (`_history_write`)."""
    oldest = parts[-1]
    messages: list[Any] = []
    for part in reversed(parts):
        messages.extend(part.args[-1])
    kept[index] = SqlWrite("history", (*oldest.args[:-1], messages), parts[0].generation)


def _merge_task(earlier: SqlWrite, later: SqlWrite) -> SqlWrite:
    """One write of a task record that leaves it as `earlier` then `later` would.

    Each column is set to the later value, or kept when that is None (the SQL's COALESCE):
    so the later non-None value, else the earlier one. The metadata is merged key by key,
    and `later`'s keys include all of `earlier`'s, so its metadata replaces every key the
    earlier one set. The runtime's store observer sends whole records, so a task's creation
    and its end in one batch are one row write, one metadata merge, not two.
    """
    args = later.args
    before = earlier.args
    merged = (
        *args[:4],
        *[before[i] if args[i] is None else args[i] for i in range(4, len(args) - 1)],
        args[-1],
    )
    return SqlWrite(
        "task", merged, later.generation, later.weight + earlier.weight, later.merge_keys
    )


def _reversed_unpacked(batch: Sequence[SqlWrite]) -> Iterator[SqlWrite]:
    for write in reversed(batch):
        if write.kind == OUTBOX_KIND:
            yield from reversed(write.args)
        else:
            yield write


# -- transactional outbox (push delivery, mail.webhooks) ------------------------------------
# A write that causes push deliveries (a task event, a task's answer) is queued together with
# its outbox rows (`webhook_event`, one per webhook event; the `webhook_events` table) as ONE
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


# -- live writes (a running task's journal) -------------------------------------------------
# A running task's journal changes several times per request (each message queued, taken,
# handled) and is one row: nearly every save is replaced by a later one of the same batch. A
# live write stands for the row's state at the moment its batch is cut: it sits in the queue
# as one item of kind "live" (args: the instance key and the `LiveWrite`), and the store
# reads it (`LiveWrite.read`, the journal's items then) when a batch takes it. Until then,
# every change of the journal reuses it: one write per task per batch, not one per change.
# A batch that holds a live write takes every write queued at its cut (not `max_batch`), so
# the state read is never ahead of a write it depends on (a turn's history is queued before
# the journal drops the turn's messages, in the same synchronous step).
LIVE_KIND = "live"


class LiveWrite:
    """A row written as it is when its batch is cut (see above).

    `read` returns (store method, its arguments after the key), or None: write nothing.
    """

    __slots__ = ("read", "cut", "frozen", "task_id")

    def __init__(
        self, read: Callable[[], tuple[str, tuple[Any, ...]] | None], task_id: str | None = None
    ) -> None:
        self.read = read
        self.task_id = task_id  # the task whose row it writes (None: not said)
        self.cut = False  # taken by a batch: a later change needs a new live write
        self.frozen = False

    def freeze(self) -> None:
        """Read the row now; the batch that takes this write writes that (not a later state)."""
        value = self.read()
        self.read = lambda: value
        self.frozen = True


# -- event runs (a task's new events) --------------------------------------------------------
# A request adds some 9 events to its task, each one row. While a task's run waits in the
# queue (one item of kind "run": args the instance key and the `EventRun`), its next events
# join it (a list append) instead of each being built, queued and taken as a write of its
# own. When a batch takes the run, its events are encoded and become one write of kind
# EVENT_ROWS_KIND holding their rows (one `executemany` with the other events, as before).
# A batch holding a run takes every write queued at its cut, as one holding a live write:
# what it writes is the state at the cut, events included.
RUN_KIND = "run"


class EventRun:
    """A task's events queued as one write (see above); `cut` once a batch took it."""

    __slots__ = ("task_id", "events", "cut", "owner")

    def __init__(self, task_id: str, event: Any, owner: dict[str, EventRun]) -> None:
        self.task_id = task_id
        self.events = [event]
        self.cut = False
        # The observer's open runs, which this one leaves when cut (the next event of its
        # task starts a new run behind the writes queued meanwhile).
        self.owner = owner

    def take(self) -> list[Any]:
        """The events, once: the run is closed from here on."""
        self.cut = True
        if self.owner.get(self.task_id) is self:
            del self.owner[self.task_id]
        return self.events


# -- end of event runs ------------------------------------------------------------------------


# Writes whose last argument is kept as the caller's snapshot and encoded when applied.
DEFERRED_KINDS = ("history", "queue")


def encode_deferred(
    writes: Sequence[SqlWrite],
    encode: Callable[[Any], str],
    lost: Callable[[Iterable[SqlWrite]], None] | None = None,
) -> list[SqlWrite]:
    """The batch with its deferred writes' snapshots encoded (see the module's docstring).

    A history or queue that cannot be encoded is logged and left out (and given to `lost`);
    the rest of the batch goes on.
    """
    return encode_deferred_sized(writes, encode, lost)[0]


def encode_deferred_sized(
    writes: Sequence[SqlWrite],
    encode: Callable[[Any], str],
    lost: Callable[[Iterable[SqlWrite]], None] | None = None,
) -> tuple[list[SqlWrite], int]:
    """`encode_deferred` and about how many bytes its result writes (its content columns), in
    one pass (runs per batch)."""
    encoded: list[SqlWrite] = []
    size = 0
    content_arg = _CONTENT_ARG.get
    for write in writes:
        kind = write.kind
        if kind in DEFERRED_KINDS and type(write.args[-1]) is not str:
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
                if lost is not None:
                    lost((write,))
                continue
            write = SqlWrite(
                kind, (*write.args[:-1], text), write.generation, write.weight, write.merge_keys
            )
        if kind == EVENT_ROWS_KIND:
            size += _rows_bytes(write.args[-1])
        else:
            value = write.args[content_arg(kind, -1)]
            if type(value) is str:
                size += len(value)
        encoded.append(write)
    return encoded, size


def _rows_bytes(rows: Sequence[tuple[Any, ...]]) -> int:
    size = 0
    for row in rows:
        data = row[5]
        if type(data) is str:
            size += len(data)
    return size


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


def runs_by_kind(
    writes: Sequence[SqlWrite], trims: bool = True
) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
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
        kind = write.kind
        if trims and kind == "history" and not write.args[6]:  # whole: later segments go
            trim = groups.get(HISTORY_TRIM_KIND)
            if trim is None:
                groups[HISTORY_TRIM_KIND] = trim = []
            trim.append(write.args[:5])
        if kind == EVENT_ROWS_KIND:
            rows = groups.get("event")
            if rows is None:
                groups["event"] = list(write.args[-1])
            else:
                rows.extend(write.args[-1])
            continue
        rows = groups.get(kind)
        if rows is None:
            groups[kind] = [write.args]
        else:
            rows.append(write.args)
    yield from groups.items()


# The argument of each kind that holds its content (the bulk of a batch's bytes).
_CONTENT_ARG: dict[str, int] = {"event": 5, "webhook_event": 6}


def batch_statements(
    writes: Sequence[SqlWrite], current: Mapping[tuple[Any, ...], int], sql: Mapping[str, str]
) -> tuple[list[tuple[str, list[tuple[Any, ...]]]], list[FencedLease]]:
    """What one batch executes, given the current generations of its fenced keys: (statement,
    rows) pairs for executemany, in order, and the leases found superseded. `writes` are
    already coalesced and encoded (`coalesce_writes`, `encode_deferred`)."""
    kept, fenced = split_fenced(writes, current)
    # A dialect without a trim statement deletes later segments in its history statement.
    runs = runs_by_kind(kept, HISTORY_TRIM_KIND in sql)
    return [(sql[kind], rows) for kind, rows in runs], fenced
