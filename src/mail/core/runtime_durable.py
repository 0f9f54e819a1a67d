"""Durable running tasks: a per-task journal of pending work, and its replay after a restart.

An entry leaves the journal only when the turn that took it has finished; the journal is
written right after the agent's history, so both land in the same store batch. Replay is
at-least-once for the turns in flight: their model and action calls run again. A model call
waits for the commit of the earlier turns' writes (`RuntimeObserver.committed`), so a finished
turn's call is not made again; a model's answer with outside effects (an action, a message to
another swarm) is committed with the entries its turn took before the turn acts on it, and the
turn's re-run takes the same messages and acts on it (the same tool-call ids: the same step
ids, `mail.core.actions.current_step_id`; the same ids for the messages it sends).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from mail.core.message import MAILMessage, new_id
from mail.core.runtime_batching import AgentInboxes
from mail.core.runtime_ports import HostLink, TaskQueues
from mail.core.tasks import INTERRUPTED_SUBJECT, ROLLED_BACK_SUBJECT
from mail.utils.background import hold

if TYPE_CHECKING:
    from mail.core.runtime_delivery import StepBudget

logger = logging.getLogger("mail.runtime")

JOURNAL_SUFFIX = "::journal"

# (task_id, items) -> None; items None means "the task has no pending work" (delete the row).
JournalWriter = Callable[[str, list[dict[str, Any]] | None], None]
# (task_id, read) -> True if the store will read the task's pending work (`read(task_id)`)
# when it writes it (a store that reads it when its batch is cut: one write per batch);
# False: it cannot now (no such store, a full buffer, a fenced instance): write it instead.
JournalToucher = Callable[[str, Callable[[str], list[dict[str, Any]] | None]], bool]


def journal_key(task_id: str) -> str:
    return task_id + JOURNAL_SUFFIX


def has_work(items: list[dict[str, Any]] | None) -> bool:
    """Whether a stored journal holds work of the task itself (not only messages enqueued
    behind it): a running task with such work continues after a restart."""
    return any(item.get("kind") != "enqueued" for item in items or ())


def is_journal_key(key: str) -> bool:
    return key.endswith(JOURNAL_SUFFIX)


class CallerWaiters(Protocol):
    """The runtime's waiting callers (core/runtime_waiting.py): a restored task gets one."""

    def add(self, task_id: str) -> asyncio.Future[MAILMessage]: ...
    def drop(self, task_id: str, future: asyncio.Future[MAILMessage]) -> None: ...


class Requeue(Protocol):
    """The runtime's multitask strategies (core/runtime_multitask.py): an enqueued message
    brought back waits again."""

    def requeue(self, task: Any, message: MAILMessage, kwargs: dict[str, Any]) -> None: ...


class JournalHost(TaskQueues, Protocol):
    """What the journal uses of the runtime."""

    @property
    def inboxes(self) -> AgentInboxes: ...

    def _spawn(self, task_id: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...
    def _run_turn(
        self, task_id: str, agent_name: str, message: MAILMessage | None, tool_choice: Any
    ) -> Coroutine[Any, Any, None]: ...
    @property
    def waiters(self) -> CallerWaiters: ...
    @property
    def multitask(self) -> Requeue: ...


class TaskJournal(HostLink[JournalHost]):
    """In-memory image of every task's pending work, mirrored to the store."""

    def __init__(
        self,
        runtime: JournalHost,
        write: JournalWriter,
        touch: JournalToucher | None = None,
        steps: StepBudget | None = None,
    ) -> None:
        self._link(runtime)
        self._write = write
        self._touch = touch
        # task_id -> model calls its run has counted (StepBudget.counts): kept with each
        # entry, so that a run continued after a restart goes on counting from there; a new
        # run's count starts again (`_steps_restarted`)
        self._step_counts: dict[str, int] = {} if steps is None else steps.counts
        # task_id -> the message whose turn is the step limit's forced finish, and its notice
        # (StepBudget.finishing): kept with that message's inbox entry, so that a re-run of
        # the turn after a restart is still the forced finish
        self._finishing = {} if steps is None else steps.finishing
        if steps is not None:
            steps.restarted = self._steps_restarted
        # task_id -> entry id -> entry (insertion ordered)
        self._entries: dict[str, dict[str, dict[str, Any]]] = {}
        # asyncio task of a running turn -> (turn id, task_id, entry ids it took)
        self._active: dict[asyncio.Task[Any], tuple[str, str, list[str]]] = {}
        self._turn_ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]
        self._dirty: set[str] = set()
        self._flush_scheduled = False
        self._replay: dict[str, list[dict[str, Any]]] = {}
        # task::agent -> a model's answer its interrupted turn acts on (`answered`)
        self._answers: dict[str, dict[str, Any]] = {}
        self._watchers: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ install
    def install(self) -> None:
        self.host.journal = self
        self.host.mailbox.journal = self
        self.host.inboxes.journal = self

    def entries(self, task_id: str) -> list[dict[str, Any]]:
        """The pending work of one task, in journal order (for tests and diagnostics)."""
        return list(self._entries.get(task_id, {}).values())

    # ------------------------------------------------------------------ hooks (hot path)
    def queued(self, seq: int, priority: int, message: MAILMessage) -> None:
        """The mailbox accepted a message."""
        entry = self._entry("mailbox", priority, seq, message)
        self._add(message["message"]["task_id"], f"m{seq}", entry)

    def _entry(self, kind: str, priority: int, seq: int, message: MAILMessage) -> dict[str, Any]:
        """A journal entry for queued work, with the turn that produced it (if any)."""
        entry: dict[str, Any] = {"kind": kind, "priority": priority, "seq": seq, "message": message}
        steps = self._step_counts.get(message["message"]["task_id"])
        if steps:
            entry["steps"] = steps
        origin = self._current_turn()
        if origin is not None:
            entry["origin"] = origin
        return entry

    def enqueued(self, task_id: str, message: MAILMessage, kwargs: dict[str, Any]) -> None:
        """A message waits for its running task's current work to end (multitask
        ``enqueue``): kept, in order, until it goes in (`dequeued`)."""
        entry = {"kind": "enqueued", "message": message, "kwargs": dict(kwargs)}
        self._add(task_id, f"q{message['id']}", entry)

    def dequeued(self, task_id: str, message_id: str) -> None:
        """An enqueued message went in (its mailbox entry is journaled now) or was withdrawn."""
        self._remove(task_id, f"q{message_id}")

    def drop_taken(self, task_id: str) -> None:
        """The task's turns in flight were cancelled (multitask ``interrupt``): what they
        had taken is not replayed after a restart."""
        entries = self._entries.get(task_id)
        taken = [i for i, e in (entries or {}).items() if e.get("taken_by")]
        for entry_id in taken:
            self._remove(task_id, entry_id)

    def drop_work(self, task_id: str) -> None:
        """All of the task's pending work was dropped (multitask ``rollback``); the messages
        enqueued behind it stay."""
        entries = self._entries.get(task_id)
        dropped = [i for i, e in (entries or {}).items() if e.get("kind") != "enqueued"]
        for entry_id in dropped:
            self._remove(task_id, entry_id)

    def popped(self, seq: int, message: MAILMessage) -> None:
        """The mailbox handed a message to the loop (its deliveries are recorded next)."""
        self._remove(message["message"]["task_id"], f"m{seq}")

    def stashed(self, task_id: str, seqs: list[int]) -> None:
        """A paused or completed task's queued messages moved to its stashed queue."""
        for seq in seqs:
            self._remove(task_id, f"m{seq}")

    def delivered(self, key: str, seq: int, priority: int, message: MAILMessage) -> None:
        """A message reached an agent's inbox (``key`` is ``task::agent``)."""
        task_id, agent = key.split("::", 1)
        entry = self._entry("inbox", priority, seq, message)
        entry["agent"] = agent
        held = self._finishing.get(task_id)
        if held is not None and held[0] == message["id"]:
            entry["finish"] = held[1]
        self._add(task_id, f"i{key}#{seq}", entry)

    def taken(self, key: str, seqs: list[int]) -> None:
        """The turn running now took these inbox entries of ``key``."""
        current = asyncio.current_task()
        if current is None:
            return
        task_id = key.split("::", 1)[0]
        turn_id = f"{self._prefix}-{next(self._turn_ids)}"
        base_len = len(self.host.agent_histories.get(key, ()))
        entries = self._entries.get(task_id, {})
        ids = []
        for seq in seqs:
            entry_id = f"i{key}#{seq}"
            entry = entries.get(entry_id)
            if entry is not None:
                entry["taken_by"] = turn_id
                entry["base_len"] = base_len
                ids.append(entry_id)
        self._active[current] = (turn_id, task_id, ids)
        if ids:
            self._mark(task_id)

    def turn_finished(self, interrupted: bool) -> None:
        """The calling turn ended; its entries are done unless it was interrupted."""
        current = asyncio.current_task()
        active = self._active.pop(current, None) if current is not None else None
        if active is None or interrupted:
            return
        _turn_id, task_id, ids = active
        entries = self._entries.get(task_id)
        if entries is None:
            return
        for entry_id in ids:
            entries.pop(entry_id, None)
        # Written now, right behind the history the turn just saved: same store batch.
        self._dirty.discard(task_id)
        self._write_task(task_id)

    def answered(
        self, messages: list[str], calls: list[dict[str, Any]], step: str | None = None
    ) -> str | None:
        """The calling turn's model answered with `calls` (with outside effects: an action,
        a message to another swarm): kept with the entries the turn took, so that a re-run
        of the turn after a crash acts on the same answer instead of asking the model again
        (`kept_answer`). Returns the step's id (`step`, else a new one), kept with it: the
        ids of the messages the answer sends derive from it. None: not kept (no entries)."""
        current = asyncio.current_task()
        active = self._active.get(current) if current is not None else None
        if active is None or not active[2]:
            return None
        _turn_id, task_id, ids = active
        step = step or new_id()
        entries = self._entries.get(task_id, {})
        for entry_id in ids:
            if (entry := entries.get(entry_id)) is not None:
                entry["answer"] = {"messages": messages, "calls": calls, "step": step}
        self._mark(task_id)
        return step

    def kept_answer(self, key: str, messages: list[str]) -> tuple[list[Any], str | None] | None:
        """The answer of `key`'s turn interrupted by a crash and its step id, if this turn
        took the same messages (else None: the model is asked)."""
        answer = self._answers.pop(key, None)
        if answer is None or answer["messages"] != messages:
            return None
        return answer["calls"], answer.get("step")

    # ------------------------------------------------------------------ bookkeeping
    def _current_turn(self) -> str | None:
        if not self._active:
            return None
        current = asyncio.current_task()
        active = self._active.get(current) if current is not None else None
        return active[0] if active is not None else None

    def _steps_restarted(self, task_id: str) -> None:
        """The task's count starts again: its entries no longer carry the old run's count
        or forced finish."""
        changed = False
        for entry in self._entries.get(task_id, {}).values():
            changed = entry.pop("steps", None) is not None or changed
            changed = entry.pop("finish", None) is not None or changed
        if changed:
            self._mark(task_id)

    def _add(self, task_id: str, entry_id: str, entry: dict[str, Any]) -> None:
        self._entries.setdefault(task_id, {})[entry_id] = entry
        self._mark(task_id)

    def _remove(self, task_id: str, entry_id: str) -> None:
        entries = self._entries.get(task_id)
        if entries is not None and entries.pop(entry_id, None) is not None:
            self._mark(task_id)

    def _mark(self, task_id: str) -> None:
        if self._touch is not None and self._touch(task_id, self.items_for):
            # The store reads the entries when it writes them, told at once: a task's first
            # change queues its journal right behind the write that created the task.
            return
        self._dirty.add(task_id)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (synchronous setup): written by the next flush
                self._flush_scheduled = False

    def flush(self) -> None:
        """Write every task whose pending work changed since the last write."""
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, set()
        for task_id in dirty:
            self._write_task(task_id)

    def _write_task(self, task_id: str) -> None:
        if self._touch is not None and self._touch(task_id, self.items_for):
            return
        self._write(task_id, self.items_for(task_id))

    def items_for(self, task_id: str) -> list[dict[str, Any]] | None:
        """What the store keeps of a task's pending work: copies of its entries (None: none)."""
        entries = self._entries.get(task_id)
        if not entries:
            self._entries.pop(task_id, None)
            return None
        return [dict(e) for e in entries.values()]

    # ------------------------------------------------------------------ restart
    def restore(self, task_id: str, items: list[dict[str, Any]], running: bool = True) -> None:
        """Take over a task's journal from the store; replayed by `loop_started`.

        For a `running` task, cuts back the histories of interrupted turns and drops what
        those turns sent. Of a task not running (its journal is left from before it ended),
        only the messages enqueued behind it are kept: they go in once the loop runs.
        """
        waiting = [i for i in items if i.get("kind") == "enqueued"]
        if not running:
            items = []
        steps = max((int(i.get("steps") or 0) for i in items), default=0)
        if steps:  # the calls the run had counted by its last stored step
            self._step_counts[task_id] = max(steps, self._step_counts.get(task_id, 0))
        items = [i for i in items if i.get("kind") != "enqueued"]
        interrupted: dict[str, tuple[str, int]] = {}  # turn id -> (agent, base_len)
        for item in items:
            turn = item.get("taken_by")
            if item.get("kind") == "inbox" and turn:
                interrupted.setdefault(turn, (item["agent"], int(item.get("base_len", 0))))
        for agent, base_len in interrupted.values():
            history = self.host.agent_histories.get(f"{task_id}::{agent}")
            if history is not None and len(history) > base_len:
                del history[base_len:]
        keep = [i for i in items if i.get("origin") not in interrupted]
        for item in keep:
            item.pop("taken_by", None)
            item.pop("base_len", None)
            item.pop("origin", None)
        inbox = [i for i in keep if i.get("kind") == "inbox"]
        mailbox = [i for i in keep if i.get("kind") != "inbox"]
        ordered = sorted(inbox, key=_order) + sorted(mailbox, key=_order)
        if not running and not waiting:
            self.discard(task_id)
            return
        self._replay[task_id] = ordered + waiting
        # Until the replay, the stored journal stays as it was loaded (minus dropped sends).
        self._entries[task_id] = {f"r{n}": dict(i) for n, i in enumerate(ordered)}
        for item in waiting:
            self._entries[task_id][f"q{item['message']['id']}"] = dict(item)
        self._mark(task_id)

    def discard(self, task_id: str) -> None:
        """Forget a stored journal of a task that is not running (a stale row)."""
        self._entries.pop(task_id, None)
        self._mark(task_id)

    @property
    def replay_pending(self) -> list[str]:
        return list(self._replay)

    def loop_started(self) -> None:
        """The runtime loop runs: hand restored work back to the agents and the mailbox."""
        if not self._replay:
            return
        replay, self._replay = self._replay, {}
        rt = self.host
        for task_id, items in replay.items():
            self._entries.pop(task_id, None)
            self._mark(task_id)
            task = rt.mail_tasks.get(task_id)
            if task is None:
                continue
            for item in items:
                if item.get("kind") == "enqueued":  # waits again, in order, for its turn
                    self.enqueued(task_id, item["message"], item.get("kwargs") or {})
                    rt.multitask.requeue(task, item["message"], item.get("kwargs") or {})
            if not task.is_running:
                continue
            self.watch_completion(task_id)
            answered: set[str] = set()  # keys whose interrupted turn's messages come next
            for item in items:
                message = item["message"]
                if item.get("kind") == "enqueued":
                    continue
                if item.get("kind") == "inbox":
                    key = f"{task_id}::{item['agent']}"
                    if "finish" in item:
                        self._finishing[task_id] = (message["id"], item["finish"])
                    if "answer" in item:
                        self._answers.setdefault(key, item["answer"])
                        answered.add(key)
                    elif key in answered:
                        answered.discard(key)
                        rt.inboxes.fence(key)
                    if rt.inboxes.add(key, message):
                        rt._spawn(task_id, rt._run_turn(task_id, item["agent"], None, None))
                else:
                    rt.mailbox.put(message, int(item["priority"]))
            # The re-run of an interrupted turn takes what it took (its kept answer is for
            # those): what was delivered after, or comes now, waits for a turn of its own.
            for key in answered:
                rt.inboxes.fence(key)
            logger.info("task %s continues after a restart (%d pending)", task_id, len(items))

    def watch_completion(self, task_id: str) -> None:
        """Store `task_complete` when the task ends, as the lost POST /message waiter would."""
        future = self.host.waiters.add(task_id)
        hold(self._watchers, asyncio.create_task(self._complete_later(task_id, future)))

    async def _complete_later(self, task_id: str, future: asyncio.Future[MAILMessage]) -> None:
        rt = self.host
        try:
            response = await future
        finally:
            rt.waiters.drop(task_id, future)
        if response["message"]["subject"] in _NOT_ANSWERS:
            return
        body = response["message"]["body"]
        rt._emit(task_id, "task_complete", lambda: f"response: '{body}'")


# Answers that are not the task's own: the runtime stopped, or a newer message took over.
_NOT_ANSWERS = frozenset({"::shutdown_requested::", INTERRUPTED_SUBJECT, ROLLED_BACK_SUBJECT})


def _order(item: dict[str, Any]) -> tuple[int, int]:
    return int(item.get("priority", 5)), int(item.get("seq", 0))
