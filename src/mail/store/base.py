"""`TaskStore`, the persistence the runtime and the server talk to: its writes go through one
write-behind buffer to a SQL database (`mail.store.sqlite`, `mail.store.postgres`), and
`FenceState`, the instance generations (fencing, in cluster mode) one store object holds."""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mail.store.records import (
    FINISHED_STATES,
    STREAMED_OUTCOME,
    InstanceKey,
    InstanceSnapshot,
    StoreUnavailableError,
    detect_tool_format,
    event_row,
    json_copy,
    normalize_start_time,
    split_task_record,
    to_json,
)
from mail.store.sql_batch import (
    EVENT_ROWS_KIND,
    LIVE_KIND,
    OUTBOX_KIND,
    RUN_KIND,
    EventRun,
    FencedLease,
    LiveWrite,
    SqlWrite,
    key_args,
    outbox_item,
)
from mail.store.writer import WriteBehindBuffer

__all__ = [  # the shared records, still importable here as before TaskStore moved in
    "STREAMED_OUTCOME",
    "InstanceKey",
    "InstanceSnapshot",
    "StoreUnavailableError",
    "TaskStore",
    "detect_tool_format",
    "normalize_start_time",
    "to_json",
]

logger = logging.getLogger("mail.store")
_fence_logger = logging.getLogger("mail.store.fencing")

# A batch the database has neither taken nor refused for this long makes the store degraded
# (/health, /status, /metrics), as a failing one does: answers stop waiting for it, and say
# so where the server reports its health (the answer's own wait gives up after as long).
STALLED_SECONDS = 5.0


def one_task_queued(queue: Iterable[SqlWrite]) -> bool:
    """Every queued write is one task's (its record, events, histories, answer, queues):
    no other request's writes wait to share a commit with the flushing one. False for any
    write whose task is not known (an outbox item, a live write that does not name its
    task): then the writer's batch takes them, as without this check."""
    task: tuple[Any, ...] | None = None
    for write in queue:
        kind = write.kind
        args = write.args
        if kind == RUN_KIND:
            mine: tuple[Any, ...] = (*key_args(args[0]), args[1].task_id)
        elif kind == LIVE_KIND:
            if args[1].task_id is None:
                return False
            mine = (*key_args(args[0]), args[1].task_id)
        elif kind in _TASK_KINDS:
            # a queue row's key is the task id, or the task id and a suffix (its journal)
            name = args[3] if kind not in _QUEUE_KINDS else args[3].split("::", 1)[0]
            mine = (args[0], args[1], args[2], name)
        else:
            return False
        if task is None:
            task = mine
        elif mine != task:
            return False
    return True


_TASK_KINDS = frozenset(("task", "event", "history", "response", "queue", "queue_delete"))
_QUEUE_KINDS = frozenset(("queue", "queue_delete"))


# Called once with the key of an instance whose lease a newer host took (`FenceState`).
FencedCallback = Callable[[InstanceKey], object]


class FenceState:
    """Generations one store object claimed, and the keys it lost."""

    __slots__ = ("leases", "fenced", "fenced_writes", "on_fenced")

    def __init__(self) -> None:
        # key -> generation this store claimed (absent: the key is not fenced at all).
        self.leases: dict[InstanceKey, int] = {}
        # keys whose generation was claimed by someone else after ours.
        self.fenced: set[InstanceKey] = set()
        self.fenced_writes = 0
        self.on_fenced: Callable[[InstanceKey], object] | None = None

    def generation_for(self, key: InstanceKey) -> int | None:
        """The generation a write for `key` carries; None for keys never claimed (hot path)."""
        leases = self.leases
        return leases.get(key) if leases else None

    def claimed(self, key: InstanceKey, generation: int) -> None:
        self.leases[key] = generation
        self.fenced.discard(key)

    def is_fenced(self, key: InstanceKey) -> bool:
        return key in self.fenced

    def drop_if_known_fenced(self, key: InstanceKey, generation: int | None) -> bool:
        """Count and drop a new write for a key already known to be lost (no round trip)."""
        if generation is not None and key in self.fenced and self.leases.get(key) == generation:
            self.fenced_writes += 1
            return True
        return False

    def dropped(self, key: InstanceKey, generation: int, count: int, current: int | None) -> None:
        """`count` writes for `key` made under `generation` were dropped: `current` holds."""
        self.fenced_writes += count
        if self.leases.get(key) != generation:
            # Our own later claim superseded these writes; we still own the key.
            return
        if key in self.fenced:
            return
        self.fenced.add(key)
        _fence_logger.warning(
            "instance %s/%s/%s lost its lease: this store holds generation %d but the"
            " current one is %s; its writes are dropped from now on",
            key.swarm_name,
            key.caller_role,
            key.caller_id,
            generation,
            "unclaimed" if current is None else current,
        )
        callback = self.on_fenced
        if callback is not None:
            try:
                callback(key)
            except Exception:
                _fence_logger.exception("on_fenced callback failed for %s", key)


class TaskStore(abc.ABC):
    """Persistence for task records, events, agent histories, responses and stashed queues.

    Usage from the runtime::

        store = create_store(os.environ.get("DATABASE_URL"))
        await store.start()
        snapshot = await store.load_instance(key)     # recovery on instance start
        await store.upsert_task(key, {...})            # returns at once
        ...
        await store.close()                            # flushes, then releases resources

    Writes for the same key and task are applied in the order they were submitted, through
    one write-behind buffer to the database (each dialect supplies the abstract methods).

    Fencing (cluster mode): after `claim_generation(key)`, every write this store makes
    for `key` is applied only while no other store has claimed a newer generation for it;
    later writes are dropped, counted in `fenced_writes`, and `is_fenced(key)` turns true
    (`on_fenced(key)` is called once). Keys never claimed are not checked at all.
    """

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
        self._fencing = FenceState()
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
            prepare=self._cut_batch,
            split=_event_rows_apart,
            write_now=self._write_batch_now if self.WRITES_AT_FLUSH else None,
            alone=one_task_queued,
            on_drop=lambda write: self._forget_histories((write,)),
        )
        # live writes and event runs in the buffer not yet taken by a batch
        self._lives_queued = 0
        # (swarm, role, id, task_id) -> agent -> what of its history was queued
        self._history_marks: dict[tuple[str, ...], dict[str, _HistoryMarks]] = {}
        # The TaskStore write methods by name, as `write_nowait` takes them.
        self._builders: dict[str, Callable[..., SqlWrite | None]] = {
            "upsert_task": self._task_write,
            "append_event": self._event_write,
            "save_history": self._history_write,
            "save_response": self._response_write,
            "save_queue": self._queue_write,
            "save_owned_queue": self._owned_queue_write,
            "delete_queue": self._queue_delete_write,
            "outbox_write": self._outbox_write,  # transactional outbox (see outbox_item)
        }

    # -- what a dialect supplies ---------------------------------------------------------
    # A dialect whose commit is synchronous (SQLite) writes a flushed batch in the flushing
    # caller (`WriteBehindBuffer`'s `write_now`): it sets this and `_write_batch_now`.
    WRITES_AT_FLUSH = False

    def _write_batch_now(self, batch: list[SqlWrite]) -> bool:
        """Commit `batch` at once on this thread (True), or decline (False)."""
        return False

    # `_text` returns a str as it is (no cleaning): a row of text fields skips it.
    TEXT_AS_IS = False

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

    @abc.abstractmethod
    async def start(self) -> None:
        """Open connections / prepare the schema. Raises StoreUnavailableError on failure."""

    @abc.abstractmethod
    async def claim_generation(self, key: InstanceKey, holder: str = "") -> int:
        """Become the owner of `key`: atomically increment and return its generation.

        From then on this store's writes for `key` carry that generation and are dropped
        once anyone claims a newer one. `holder` is a free-form label (node, process) kept
        with the claim for operators. Claim BEFORE `load_instance`, so that the state read
        includes every write the previous owner managed to commit and nothing after it.
        Raises StoreUnavailableError when the database cannot be reached.
        """

    # -- lifecycle -------------------------------------------------------------------------
    async def close(self) -> None:
        """Flush what can be flushed (bounded wait), then release resources. Idempotent."""
        lost = await self._buffer.close(self._close_timeout)
        if lost:
            logger.error("closing the %s store with %d unwritten write(s)", self.backend, lost)
        await self._release()

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write acknowledged so far is durably stored: True when drained,
        False if `timeout` (seconds) ran out first."""
        if self._buffer.pending and not self._buffer.running:
            return False
        return await self._buffer.flush(timeout)

    # -- writes ----------------------------------------------------------------------------
    # Each write is built by a synchronous `_<kind>_write` (checked and encoded in the
    # caller), then queued: awaited by the TaskStore methods, at once
    # by `write_nowait` (the runtime's StoreObserver: no task switch per write).
    def _task_write(self, key: InstanceKey, record: Mapping[str, Any]) -> SqlWrite | None:
        columns, extra = split_task_record(record, copy=False)  # encoded just below
        if extra.get("state") in FINISHED_STATES:
            # The task ended: its histories' marks go (the next save, if it resumes, is whole).
            self._history_marks.pop((*key_args(key), columns["task_id"]), None)
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
        return self._write(key, "task", args, frozenset(extra))

    def _event_write(self, key: InstanceKey, task_id: str, event: Any) -> SqlWrite | None:
        name, data, event_id = event_row(event)
        text = self._text
        args = (*key_args(key), task_id, text(name), text(data), text(event_id))
        return self._write(key, "event", args)

    def _history_write(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> SqlWrite | None:
        # A history is stored as segments (see `_HistoryMarks`): a save that extends what
        # was queued before writes its new messages alone, anything else the whole history.
        # Encoded when its batch is applied; each message written is copied, so a later
        # change to one of its fields does not reach this save.
        task = (*key_args(key), task_id)
        agents = self._history_marks.get(task)
        marks = None if agents is None else agents.get(agent_name)
        start = 0
        if (
            marks is not None
            and len(history) >= len(marks.queued)
            and marks.queued == history[: len(marks.queued)]  # identity first: 9x all(is_)
        ):
            start = len(marks.queued)
            if start == len(history) and (tool_format or marks.tool_format) == marks.tool_format:
                return None  # nothing new
        tail = history[start:] if start else history
        snapshot = [dict(m) if isinstance(m, dict) else m for m in tail]
        if start and marks is not None:  # (marks: for mypy)
            fmt = tool_format or marks.tool_format
            write = self._write(key, "history", (*task, agent_name, fmt, start, snapshot))
            if write is not None:
                marks.queued.extend(tail)
                return write
        else:
            fmt = tool_format or detect_tool_format(snapshot)
            write = self._write(key, "history", (*task, agent_name, fmt, 0, snapshot))
            if write is not None:
                if agents is None:
                    agents = self._history_marks[task] = {}
                agents[agent_name] = _HistoryMarks(list(history), fmt)
                return write
        if agents is not None:  # fenced: nothing queued
            agents.pop(agent_name, None)
        return None

    def _forget_histories(self, writes: Iterable[SqlWrite]) -> None:
        """History writes that will not be stored (dropped by the writer, not encodable):
        the next save of each of those histories writes it whole."""
        for write in writes:
            if write.kind == OUTBOX_KIND:
                self._forget_histories(write.args)
            elif write.kind == "history":
                agents = self._history_marks.get(write.args[:4])
                if agents is not None:
                    agents.pop(write.args[4], None)

    def _response_write(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> SqlWrite | None:
        return self._write(key, "response", (*key_args(key), task_id, self._json(dict(response))))

    def _queue_write(
        self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]
    ) -> SqlWrite | None:
        # A paused task's stash (rare): copied whole, so no later change reaches it.
        return self._write(key, "queue", (*key_args(key), task_id, json_copy(items)))

    def _owned_queue_write(
        self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]
    ) -> SqlWrite | None:
        # `items` were made for this write and nobody changes them (a running task's journal
        # copies its entries for each write): kept as they are, not copied again.
        return self._write(key, "queue", (*key_args(key), task_id, items))

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

    def _write(
        self,
        key: InstanceKey,
        kind: str,
        args: tuple[Any, ...],
        merge_keys: frozenset[str] | None = None,
    ) -> SqlWrite | None:
        fencing = self._fencing
        if not fencing.leases:  # no lease claimed (not in a cluster): nothing is fenced
            return SqlWrite(kind, args, None, 1, merge_keys)
        generation = fencing.generation_for(key)
        if generation is not None and fencing.drop_if_known_fenced(key, generation):
            return None
        return SqlWrite(kind, args, generation, 1, merge_keys)

    def write_nowait(self, key: InstanceKey, method: str, *args: Any) -> bool:
        """Queue the write `await self.<method>(key, *args)` would make, without awaiting.

        Returns False, writing nothing, while the buffer is full (the caller then awaits the
        method, which waits for room). A bad value raises here, as in the method.
        """
        buffer = self._buffer
        if buffer.full:
            return False
        write = self._builders[method](key, *args)
        if write is not None:
            buffer.try_put(write)  # not full: checked above, and nothing ran since
        return True

    def live_write_nowait(
        self,
        key: InstanceKey,
        read: Callable[[], tuple[str, tuple[Any, ...]] | None],
        task_id: str | None = None,
    ) -> LiveWrite | None:
        """Queue a row written as `read()` says when its batch is cut (`LiveWrite`).

        None, queueing nothing, while the buffer is full or the instance is fenced (in a
        cluster a write keeps the lease it was made under: the caller writes at once).
        """
        buffer = self._buffer
        if buffer.full or self._fencing.leases:
            return None
        live = LiveWrite(read, task_id)
        buffer.try_put(SqlWrite(LIVE_KIND, (key, live)))
        self._lives_queued += 1
        return live

    def event_run_nowait(
        self, key: InstanceKey, task_id: str, event: Any, runs: dict[str, EventRun]
    ) -> EventRun | None:
        """Queue `event` as the first of a run of `task_id`'s events (`EventRun`), entered
        in `runs` (the caller's open runs, which the run leaves when a batch takes it).

        None, queueing nothing, while the buffer is full or the instance is fenced (as
        `live_write_nowait`)."""
        buffer = self._buffer
        if buffer.full or self._fencing.leases:
            return None
        run = EventRun(task_id, event, runs)
        buffer.try_put(SqlWrite(RUN_KIND, (key, run)))
        self._lives_queued += 1
        runs[task_id] = run
        return run

    def _event_rows(self, key: InstanceKey, run: EventRun) -> SqlWrite:
        """A run's events as one write of their rows (`_event_write`'s, encoded now)."""
        head = (*key_args(key), run.task_id)
        text = self._text
        as_is = self.TEXT_AS_IS
        rows: list[tuple[Any, ...]] = []
        append = rows.append
        for event in run.take():
            # A runtime TaskEvent's fields are text already: its row at once, where the
            # dialect keeps text as it is (`event_row` and `_text` cost 3x that per event).
            store_data = getattr(event, "store_data", None) if as_is else None
            if store_data is not None:
                name = getattr(event, "event", None)
                data = store_data()
                event_id = getattr(event, "id", None)
                if (
                    type(name) is str
                    and type(data) is str
                    and (event_id is None or type(event_id) is str)
                ):
                    append((*head, name, data, event_id))
                    continue
            name, data, event_id = event_row(event)
            append((*head, text(name), text(data), text(event_id)))
        return SqlWrite(EVENT_ROWS_KIND, (*head, rows))

    def _cut_batch(
        self, batch: list[SqlWrite], queue: Sequence[SqlWrite]
    ) -> tuple[int, list[SqlWrite]]:
        """The writer's `prepare`: a batch with live writes or event runs takes the whole
        queue and reads them now (see `LiveWrite`, `EventRun`). Runs on the event loop,
        between two awaits."""
        if not self._lives_queued or not any(
            w.kind == LIVE_KIND or w.kind == RUN_KIND for w in batch
        ):
            return len(batch), batch
        if len(batch) < len(queue):
            batch = list(queue)
        writes: list[SqlWrite] = []
        # Read now, so the newest state of its row: last in the batch, behind every write
        # it may depend on even when a rejected batch is retried one write at a time. (A
        # frozen one holds an older state: it stays in its place, before later saves.)
        last: list[SqlWrite] = []
        for write in batch:
            kind = write.kind
            if kind == RUN_KIND:
                self._lives_queued -= 1
                try:
                    writes.append(self._event_rows(*write.args))
                except Exception:  # noqa: BLE001 - as a live write's
                    logger.exception("a task's events could not be encoded")
                continue
            if kind != LIVE_KIND:
                writes.append(write)
                continue
            key, live = write.args
            live.cut = True
            self._lives_queued -= 1
            try:
                call = live.read()
                made = None if call is None else self._builders[call[0]](key, *call[1])
            except Exception:  # noqa: BLE001 - one bad row must not stop the batch
                logger.exception("a live write could not be read")
                continue
            if made is not None:
                (writes if live.frozen else last).append(made)
        writes.extend(last)
        return len(batch), writes

    async def upsert_task(self, key: InstanceKey, record: Mapping[str, Any]) -> None:
        """Create or update a task record.

        Record fields: task_id (required), task_owner, task_contributors (list),
        remote_swarms (list), is_running, completed, title, start_time (ISO 8601).
        A field that is absent or None leaves the stored value unchanged, so the runtime
        can send only what changed (e.g. ``{"task_id": t, "is_running": False}``).
        Other keys are stored as well and returned merged into the record.
        """
        await self._submit(self._task_write(key, record))

    async def append_event(self, key: InstanceKey, task_id: str, event: Any) -> None:
        """Append one SSE event to a task's timeline.

        `event` is a dict ``{"event", "data" (str; a dict is JSON-encoded), "id"}`` or an
        object with those attributes (e.g. `sse_starlette.ServerSentEvent`, `TaskEvent`).
        """
        await self._submit(self._event_write(key, task_id, event))

    async def save_history(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> None:
        """Store an agent's full history for a task, REPLACING any earlier one.

        `tool_format` is "completions" or "responses"; None means "detect from the
        history" (see `detect_tool_format`).
        """
        await self._submit(self._history_write(key, task_id, agent_name, tool_format, history))

    async def save_response(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> None:
        """Store (or replace) a task's final response."""
        await self._submit(self._response_write(key, task_id, response))

    async def save_queue(self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]) -> None:
        """Store the stashed queue of a paused task: ``[{"priority", "seq", "message"}, ...]``."""
        await self._submit(self._queue_write(key, task_id, items))

    async def save_owned_queue(
        self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]
    ) -> None:
        """`save_queue` of items made for this call that nobody changes afterwards."""
        await self._submit(self._owned_queue_write(key, task_id, items))

    async def delete_queue(self, key: InstanceKey, task_id: str) -> None:
        """Forget the stashed queue of a task (after it was resumed or finished)."""
        await self._submit(self._queue_delete_write(key, task_id))

    async def _submit(self, write: SqlWrite | None) -> None:
        if write is not None:
            await self._buffer.submit(write)

    def _count_fenced(self, fenced: Sequence[FencedLease]) -> None:
        # Called only once the transaction committed (a failed batch is retried whole).
        for key, generation, count, now_current in fenced:
            self._fencing.dropped(key, generation, count, now_current)
            # its histories' segments may be among the writes dropped: written whole next
            lease = key_args(key)
            for task in [t for t in self._history_marks if t[:3] == lease]:
                del self._history_marks[task]

    def held_generation(self, key: InstanceKey) -> int | None:
        """The generation this store claimed for `key`, or None if it never claimed one."""
        return self._fencing.leases.get(key)

    def is_fenced(self, key: InstanceKey) -> bool:
        """True once a write for `key` was refused because a newer generation was claimed."""
        return self._fencing.is_fenced(key)

    @property
    def on_fenced(self) -> FencedCallback | None:
        """Called with the key, once, when this store learns it lost `key`.

        It runs in the store's writer (PostgreSQL) or in the writing coroutine (memory):
        it must return quickly (e.g. schedule the instance's shutdown, do not await it).
        """
        return self._fencing.on_fenced

    @on_fenced.setter
    def on_fenced(self, callback: FencedCallback | None) -> None:
        self._fencing.on_fenced = callback

    @property
    def fenced_writes(self) -> int:
        """Writes dropped because their generation was no longer the current one."""
        return self._fencing.fenced_writes

    # -- reads -----------------------------------------------------------------------------
    async def settle(self) -> None:
        """Read-your-writes: wait (up to `read_timeout`) for the writes acknowledged so far.
        None pending: the read goes ahead at once, from what the database has. While the
        database does not take them (`is_degraded`: a full disk, PostgreSQL away, a lock
        held for seconds) a read does not wait for them: StoreUnavailableError (503) at once,
        as a read of an unreachable PostgreSQL fails."""
        if not self._buffer.pending:
            return
        if self.is_degraded():
            raise StoreUnavailableError(
                f"the {self.backend} store holds {self._buffer.pending} write(s) the database "
                f"has not taken yet (last error: {self.last_error}); try again later"
            )
        if not await self.flush(self._read_timeout):
            raise StoreUnavailableError(
                f"pending writes could not be stored within {self._read_timeout:.0f}s "
                f"(last error: {self.last_error})"
            )

    async def load_instance(self, key: InstanceKey) -> InstanceSnapshot:
        """Everything stored for one instance, including writes still being flushed."""
        await self.settle()  # what was acknowledged for this instance must be visible
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
    def backend(self) -> str:
        return type(self).__name__

    @property
    def pending_writes(self) -> int:
        """Writes acknowledged but not yet durably stored."""
        return self._buffer.pending

    @property
    def failed_attempts(self) -> int:
        """Write attempts that failed with a transient error since start (retried)."""
        return self._buffer.failed_attempts

    @property
    def last_error(self) -> str | None:
        """Text of the most recent write/connection error, or None if there never was one."""
        stalled = self._buffer.stalled_for()
        if stalled >= STALLED_SECONDS:
            return (
                f"no write completed for {stalled:.0f}s: the database neither takes nor "
                "refuses it (another process holding its lock? a disk that does not answer?)"
            )
        return self._buffer.last_error

    @property
    def dropped_writes(self) -> int:
        return self._buffer.dropped

    def writes_backed_up(self) -> bool:
        """True while the store's queue of unwritten writes is at its bound (`max_pending`):
        new work would only wait in memory (the server refuses new tasks meanwhile)."""
        return self._buffer.full

    @property
    def max_pending_writes(self) -> int:
        return self._buffer.max_pending

    def is_degraded(self) -> bool:
        """True while writes are failing and piling up."""
        buffer = self._buffer
        return buffer.outage_since is not None or buffer.stalled_for() >= STALLED_SECONDS

    def status(self) -> dict[str, Any]:
        """A JSON-able health summary, e.g. for /status or /health."""
        return {
            "backend": self.backend,
            "pending_writes": self.pending_writes,
            "failed_attempts": self.failed_attempts,
            "last_error": self.last_error,
            "degraded": self.is_degraded(),
            "fenced_writes": self.fenced_writes,
            "dropped_writes": self._buffer.dropped,
        }

    async def __aenter__(self) -> TaskStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _HistoryMarks:
    """What a store queued of one agent's history on one task: the message objects
    (references: a later save that starts with the same objects extends them) and its tool
    format. However many segments a history has, an extension is never written whole: a
    read joins one row per turn (fewer rows than the turn's events), where rewriting it
    every k saves wrote n^2/k messages over n turns (the most of SQLite's bytes written,
    bench/results-store.md)."""

    __slots__ = ("queued", "tool_format")

    def __init__(self, queued: list[Any], tool_format: str) -> None:
        self.queued = queued
        self.tool_format = tool_format


def _event_rows_apart(write: SqlWrite) -> list[SqlWrite]:
    """A run's events (EVENT_ROWS_KIND) as one "event" write each, for the buffer to retry
    them one by one when the database rejected the run: a bad event (text it refuses) costs
    that event alone, not its task's other events of the batch. [] for any other write."""
    if write.kind != EVENT_ROWS_KIND:
        return []
    return [SqlWrite("event", row, write.generation) for row in write.args[-1]]
