"""Wiring between a runtime instance and a TaskStore: write-through hooks and recovery."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from mail.core.events import TaskEvent, events_from_records
from mail.core.observer import RuntimeObserver
from mail.core.runtime_durable import TaskJournal, has_work, is_journal_key, journal_key
from mail.core.runtime_ports import HostLink
from mail.core.tasks import MAILTask
from mail.core.tools import AgentToolCall

if TYPE_CHECKING:
    from mail.core.runtime import MAILRuntime
    from mail.store import TaskStore
    from mail.store.base import InstanceKey, InstanceSnapshot

logger = logging.getLogger("mail.store")

# The most events one queued run of a task holds (`EventRun`): past it the task's next event
# opens a new run, one more item under the store's `max_pending`. A run waits in the queue
# for as long as the batch ahead of it is retried (a database outage); without a cap one
# run took every event its task made meanwhile, past the bound on the queue.
MAX_RUN_EVENTS = 64
# The longest a model call waits for the commit of the steps before it (`committed`, seconds).
STEP_COMMIT_TIMEOUT = 5.0
# `room`'s warning that agent turns wait is repeated at most this often (seconds).
_ROOM_LOG_INTERVAL = 30.0


class EventOutbox(Protocol):
    """Push delivery's side of an instance (``mail.webhooks.outbox.InstanceOutbox``): which
    outbox rows a task event or a task's answer causes. Installed by the server; the rows are
    written in the same store write as their cause (one transaction)."""

    def rows_for_event(self, task: MAILTask, event: TaskEvent) -> list[Any]: ...
    def rows_for_answer(
        self, task_id: str, task: MAILTask | None, response: dict[str, Any]
    ) -> list[Any]: ...
    def record(self, rows: list[Any]) -> None: ...
    def kick(self) -> None: ...


class StoreObserver(RuntimeObserver, HostLink["MAILRuntime"]):
    """Forwards runtime state changes to a TaskStore, in order, off the hot path."""

    def __init__(
        self,
        runtime: MAILRuntime,
        store: TaskStore,
        key: InstanceKey,
        persist_histories: bool = True,
    ) -> None:
        # Weakly: the runtime holds its observer (see mail.core.runtime_ports.HostLink).
        self._link(runtime)
        self.store = store
        self.key = key
        self.persist_histories = persist_histories
        # Writes waiting behind one the store could not take at once, and the task that
        # hands them over in order: both made on first need (most instances never need
        # them: a queue and a parked task are ~2 KB an instance).
        self._queue: asyncio.Queue[tuple[str, tuple[Any, ...]]] | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._started = False
        self._nowait = getattr(store, "write_nowait", None)
        self._backlog = 0  # writes taken by the drain task and not yet handed to the store
        # Set whenever the drain is empty again (`room`): made on first need.
        self._drained: asyncio.Event | None = None
        self._room_logged = float("-inf")  # when `room` last logged that turns wait
        # The queue rows (stashed queues and journals) this instance has in the store, once
        # `stored_queues` said which it had when loaded: a task that never stored one has
        # nothing to delete when it ends (one write less per task). None: unknown, delete.
        self._stored_queues: set[str] | None = None
        # Push delivery (None: off). A store with `outbox_write` (the SQL stores) takes a
        # write and its outbox rows as one item of one transaction; another store writes the
        # cause and hands the rows to the outbox.
        self.outbox: EventOutbox | None = None
        self._outbox_in_store = hasattr(store, "outbox_write")
        # A store that keeps a journal's items without copying them (the SQL stores).
        self._owned_queues = hasattr(store, "save_owned_queue")
        # A store that reads a journal when its batch is cut (the SQL stores: `LiveWrite`),
        # and the live write of each task waiting in its buffer.
        self._live_nowait = getattr(store, "live_write_nowait", None)
        self._lives: dict[str, Any] = {}
        # Likewise each task's record: one live write per task per batch, the record built
        # and encoded once, when the batch is cut (a request changes it twice or more).
        self._record_lives: dict[str, Any] = {}
        # A store that queues a task's events as one write per batch (the SQL stores:
        # `EventRun`), and the open run of each task (it leaves when a batch takes it).
        self._run_nowait = getattr(store, "event_run_nowait", None)
        self._runs: dict[str, Any] = {}

    def stored_queues(self, keys: Iterable[str]) -> None:
        """The queue rows the store held when the instance was loaded (its snapshot's)."""
        self._stored_queues = set(keys)

    def note_stored_queues(self, keys: Iterable[str]) -> None:
        """More queue rows the store holds (a stored task put back into the instance)."""
        if self._stored_queues is not None:
            self._stored_queues.update(keys)

    def forget_queue(self, name: str) -> None:
        """Remove a queue row of the instance, after every write queued before this one."""
        self._put("delete_queue", name)

    def start(self) -> None:
        self._started = True
        if self._queue is not None and self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain())

    def _put(self, method: str, *args: Any) -> None:
        # Straight to the store unless earlier writes still wait in the drain (order).
        if self._nowait is not None and not self._backlog:
            try:
                if self._nowait(self.key, method, *args):
                    return
            except Exception:  # noqa: BLE001 - as in _drain: logged, persistence goes on
                logger.exception("store write %s failed", method)
                return
        if self._lives or self._record_lives:
            # From here on writes wait in the drain, behind the store's buffer: a live write
            # read later could be ahead of them. It writes the journal (the record) as it
            # is now.
            lives, self._lives = self._lives, {}
            records, self._record_lives = self._record_lives, {}
            for live in (*lives.values(), *records.values()):
                live.freeze()
        if self._runs:
            # Likewise no later event joins a run queued ahead of the drain's writes.
            self._runs.clear()
        self._backlog += 1
        if self._queue is None:
            self._queue = asyncio.Queue()
        self._queue.put_nowait((method, args))
        if self._started and self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        queue = self._queue
        assert queue is not None
        while True:
            method, args = await queue.get()
            try:
                await getattr(self.store, method)(self.key, *args)
            except Exception:  # noqa: BLE001 - one bad write must not stop persistence
                logger.exception("store write %s failed", method)
            finally:
                self._backlog -= 1
                queue.task_done()
                if not self._backlog and self._drained is not None:
                    self._drained.set()

    def room(self) -> Awaitable[object] | None:
        """An agent's next turn waits while writes wait in the drain behind a full store
        queue (see the module's docstring); None (go on) otherwise. Only with a store that
        takes writes at once (`write_nowait`): another store's drain is its normal path."""
        if not self._backlog or self._nowait is None:
            return None
        drained = self._drained
        if drained is None:
            drained = self._drained = asyncio.Event()
        drained.clear()
        now = time.monotonic()
        if now - self._room_logged >= _ROOM_LOG_INTERVAL:  # once an episode, not per turn
            self._room_logged = now
            logger.warning(
                "%s: %d store write(s) wait behind the store's full queue (the database is "
                "not taking writes); agent turns of this instance wait until they are "
                "handed over ([server.store] max_pending_writes)",
                self.key.caller_id,
                self._backlog,
            )
        return drained.wait()

    def committed(self) -> Awaitable[bool] | None:
        """Before an agent's model call: the commit of every write queued so far (the
        histories, journal and events of the task's finished steps), so that after a crash
        the task resumes from its last step and only the step in flight calls its model
        again. Only with a write-behind store and a journal, and not while the store reports
        an outage (the turns then go on; their writes wait in the queue)."""
        if self.host.journal is None or self._nowait is None or self.store.is_degraded():
            return None
        return self.flush(STEP_COMMIT_TIMEOUT)

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every change made so far is committed (False: `timeout` ran out).
        The journal's changes of this pass of the loop are queued first: it writes a task
        at the pass's end unless the store reads it at its batch (not once an instance's
        generation is claimed), and a caller told its message was taken (a stream's first
        event) must find it after a kill -9."""
        journal = getattr(self.host, "journal", None)  # (a stand-in host may have none)
        if journal is not None:
            journal.flush()
        if self._queue is not None:
            try:
                await asyncio.wait_for(self._queue.join(), timeout)
            except TimeoutError:
                return False
        return await self.store.flush(timeout)

    async def close(self, timeout: float = 10.0) -> None:
        await self.flush(timeout)
        if self._drain_task is not None:
            self._drain_task.cancel()
            await asyncio.gather(self._drain_task, return_exceptions=True)
            self._drain_task = None

    @property
    def runtime(self) -> MAILRuntime:
        return self.host

    # ------------------------------------------------------------------ hooks
    def task_changed(self, task: MAILTask) -> None:
        if self._live_nowait is not None and not self._backlog:
            # The record is read when the store's batch is cut (`LiveWrite`): while this
            # task's live write waits, a change needs no write of its own.
            task_id = task.task_id
            live = self._record_lives.get(task_id)
            if live is not None and not live.cut:
                return
            live = self._live_nowait(self.key, lambda: self._read_record(task), task_id)
            if live is not None:
                self._record_lives[task_id] = live
                return
            self._record_lives.pop(task_id, None)
        self._put("upsert_task", self._record(task))

    def _read_record(self, task: MAILTask) -> tuple[str, tuple[Any, ...]]:
        # taken by a batch: the next change queues a new live write
        self._record_lives.pop(task.task_id, None)
        return ("upsert_task", (self._record(task),))

    def _record(self, task: MAILTask) -> dict[str, Any]:
        record = task.to_store_record()
        caller = self.runtime.last_breakpoint_caller.get(task.task_id)
        calls = self.runtime.last_breakpoint_tool_calls.get(task.task_id)
        record["breakpoint_caller"] = caller or ""
        record["breakpoint_calls"] = [c.model_dump() for c in calls] if calls else []
        return record

    def event_added(self, task: MAILTask, event: TaskEvent) -> None:
        outbox = self.outbox
        rows = outbox.rows_for_event(task, event) if outbox is not None else None
        task_id = task.task_id
        if rows:
            self._runs.pop(task_id, None)  # later events queue behind this one
            self._put_with_outbox(rows, "append_event", task_id, event)
            return
        run = self._runs.get(task_id)
        if run is not None:  # open: no batch took it yet (it leaves `_runs` when taken)
            if len(run.events) < MAX_RUN_EVENTS:
                run.events.append(event)
                return
            del self._runs[task_id]  # full: it stays queued as it is, a new run follows
        if (
            self._run_nowait is None
            or self._backlog
            or self._run_nowait(self.key, task_id, event, self._runs) is None
        ):
            self._put("append_event", task_id, event)

    def history_changed(
        self, task_id: str, agent_name: str, tool_format: str, history: list[dict[str, Any]]
    ) -> None:
        if not self.persist_histories:
            return
        nowait = self._nowait
        if nowait is not None and not self._backlog:
            # A store that takes writes at once takes what is new of the live list now
            # (a SQL store copies the messages it writes): no copy of the whole list here.
            try:
                if nowait(self.key, "save_history", task_id, agent_name, tool_format, history):
                    return
            except Exception:  # noqa: BLE001 - as in _put: logged, persistence goes on
                logger.exception("store write save_history failed")
                return
        # Queued: the list as it is now (the runtime's goes on changing)
        self._put("save_history", task_id, agent_name, tool_format, list(history))

    def response_set(self, task_id: str, response: dict[str, Any]) -> None:
        outbox = self.outbox
        if outbox is not None:
            task = self.runtime.mail_tasks.get(task_id)
            rows = outbox.rows_for_answer(task_id, task, response)
            if rows:
                self._put_with_outbox(rows, "save_response", task_id, response)
                return
        self._put("save_response", task_id, response)

    def _put_with_outbox(self, rows: list[Any], method: str, *args: Any) -> None:
        assert self.outbox is not None
        if self._outbox_in_store:
            self._put("outbox_write", method, args, rows)
        else:
            self._put(method, *args)
            self.outbox.record(rows)
        self.outbox.kick()

    def queue_stashed(self, task_id: str, items: list[dict[str, Any]]) -> None:
        self._save_queue(task_id, list(items))

    def journal_changed(self, task_id: str, items: list[dict[str, Any]] | None) -> None:
        """A running task's pending work (a TaskJournal write), kept beside its stashed queue.

        The journal makes `items` (copies of its entries) for this call alone: a store that
        can keeps them as they are."""
        self._save_queue(journal_key(task_id), items, self._owned_queues)

    @property
    def takes_live_journal(self) -> bool:
        """The store reads a journal when its batch is cut (`journal_touched`)."""
        return self._live_nowait is not None

    def journal_touched(
        self, task_id: str, read: Callable[[str], list[dict[str, Any]] | None]
    ) -> bool:
        """A running task's pending work changed; `read(task_id)` gives it (or None).

        With a store that can, the journal is read when the store's batch is cut: while
        this task's live write waits in the buffer, a change needs no write of its own.
        False: no live write now (another store, a full buffer, a fenced instance); the
        journal then writes its items (`journal_changed`)."""
        live = self._lives.get(task_id)
        if live is not None and not live.cut:
            return True
        if self._live_nowait is not None and not self._backlog:
            live = self._live_nowait(self.key, lambda: self._read_live(task_id, read), task_id)
            if live is not None:
                self._lives[task_id] = live
                return True
        self._lives.pop(task_id, None)
        return False

    def _read_live(
        self, task_id: str, read: Callable[[str], list[dict[str, Any]] | None]
    ) -> tuple[str, tuple[Any, ...]] | None:
        self._lives.pop(task_id, None)  # taken by a batch: the next change queues a new one
        return self._queue_call(journal_key(task_id), read(task_id), True)

    def _save_queue(
        self, key: str, items: list[dict[str, Any]] | None, owned: bool = False
    ) -> None:
        call = self._queue_call(key, items, owned)
        if call is not None:
            self._put(call[0], *call[1])

    def _queue_call(
        self, key: str, items: list[dict[str, Any]] | None, owned: bool
    ) -> tuple[str, tuple[Any, ...]] | None:
        """The store write that leaves the queue row `key` holding `items` (None: none)."""
        stored = self._stored_queues
        if items:
            if stored is not None:
                stored.add(key)
            return ("save_owned_queue" if owned else "save_queue", (key, items))
        if stored is None or key in stored:
            if stored is not None:
                stored.discard(key)
            return ("delete_queue", (key,))
        return None


def restore_snapshot(
    runtime: MAILRuntime, snapshot: InstanceSnapshot, journal: TaskJournal | None = None
) -> int:
    """Load a stored instance into a fresh runtime; returns the number of tasks restored.

    With a `journal`, a task that was running and has journaled pending work stays running
    and continues once the runtime loop runs (see mail.core.runtime_durable). Without one, or
    without pending work, a running task is marked stopped: a user_response continues it.
    """
    restored = 0
    continuing: list[str] = []
    for task_id, record in snapshot.tasks.items():
        if task_id in runtime.mail_tasks or task_id == "*":
            continue
        task = MAILTask.from_store_record(record)
        if task.is_running and not task.completed:
            if journal is not None and has_work(snapshot.queues.get(journal_key(task_id))):
                continuing.append(task_id)
            else:
                task.stop()
        task.events.extend(events_from_records(snapshot.events.get(task_id, [])))
        response = snapshot.responses.get(task_id)
        if response is not None:
            task.response = response
            runtime.response_messages[task_id] = response  # type: ignore[assignment]
        task.task_message_queue = list(snapshot.queues.get(task_id, []))
        caller = record.get("breakpoint_caller")
        calls = record.get("breakpoint_calls") or []
        if caller and calls:
            runtime.last_breakpoint_caller[task_id] = caller
            runtime.last_breakpoint_tool_calls[task_id] = [
                AgentToolCall.model_validate(c) for c in calls
            ]
        runtime.mail_tasks[task_id] = task
        runtime.open_tasks.add(task_id)
        restored += 1
    for (task_id, agent_name), history in snapshot.histories.items():
        runtime.agent_histories[f"{task_id}::{agent_name}"] = list(history)
    if journal is not None:
        for key, items in snapshot.queues.items():
            if is_journal_key(key):
                # A task that ended keeps only the messages enqueued behind it (they go in).
                task_id = key[: -len(journal_key(""))]
                journal.restore(task_id, list(items), running=task_id in continuing)
    return restored
