"""A message to a task that is still running: its multitask strategy (`Multitask`)."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from mail.core.message import MAILMessage
from mail.core.runtime_batching import AgentInboxes
from mail.core.runtime_ports import HostLink, TaskQueues, TurnLocks
from mail.core.system_messages import system_task_end
from mail.core.tasks import (
    INTERRUPTED_SUBJECT,
    MULTITASK_EVENT,
    ROLLED_BACK_SUBJECT,
    MAILTask,
    TaskState,
)

logger = logging.getLogger("mail.runtime")

STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")
DEFAULT_STRATEGY = "reject"
STRATEGY_KWARG = "multitask_strategy"
# How long a request checked against the bound of waiting messages (`reserve`) holds its place
# until its message is enqueued: a request that gave up between the two frees it by then.
RESERVATION_SECONDS = 30.0
# States in which the current work has ended, so an enqueued message may go in (a pause for
# a person is not an end: the message waits for the run the person resumes).
_ENDED = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.STOPPED})
_SUPERSEDED = {
    "interrupt": (
        INTERRUPTED_SUBJECT,
        "This message was interrupted by a newer message to the task (multitask_strategy "
        "'interrupt'): the work done so far is kept and the task goes on with the newer "
        "message, whose caller gets its answer.",
    ),
    "rollback": (
        ROLLED_BACK_SUBJECT,
        "This message was rolled back by a newer message to the task (multitask_strategy "
        "'rollback'): its work was discarded and the newer message replaces it; that "
        "message's caller gets the task's answer.",
    ),
}


@dataclass(slots=True)
class Enqueued:
    """A message waiting for its task's current work to end."""

    message: MAILMessage
    kwargs: dict[str, Any]
    # Its caller's future (registered with the waiters once the message goes in); None for
    # a message brought back after a restart, whose caller is gone.
    future: asyncio.Future[MAILMessage] | None


class Waiters(Protocol):
    """The runtime's waiting callers (core/runtime_waiting.py)."""

    def adopt(self, task_id: str, future: asyncio.Future[MAILMessage]) -> None: ...
    def resolve(self, task_id: str, response: MAILMessage) -> None: ...


class MultitaskHost(TaskQueues, TurnLocks, Protocol):
    """What the strategies use of the runtime."""

    @property
    def inboxes(self) -> AgentInboxes: ...

    @property
    def waiters(self) -> Waiters: ...
    @property
    def _turns_by_task(self) -> dict[str, set[asyncio.Task[Any]]]: ...
    @property
    def _turn_gates(self) -> dict[str, Any]: ...

    def submit(self, message: MAILMessage) -> object: ...
    def _start_turn(self, task_id: str, agent_name: str) -> None: ...
    def _new_run(self, task_id: str) -> None: ...
    def _submit_for_task(
        self, message: MAILMessage, resume_from: str | None, kwargs: dict[str, Any]
    ) -> asyncio.Future[MAILMessage] | None: ...


class Multitask(HostLink[MultitaskHost]):
    """Messages to running tasks: the enqueued ones, and interrupts and rollbacks."""

    def __init__(self, host: MultitaskHost) -> None:
        self._link(host)
        self._queued: dict[str, collections.deque[Enqueued]] = {}
        self._delivering: set[str] = set()  # tasks whose next enqueued message goes in soon
        # task id -> when requests to enqueue were let through and not enqueued yet (`reserve`)
        self._reserved: dict[str, collections.deque[float]] = {}

    # ------------------------------------------------------------------ rollback points
    def mark_start(self, task: MAILTask, stashed: list[dict[str, Any]] | None = None) -> None:
        """A caller's message is about to start a run of `task` (a continuation): where a
        rollback of that message goes back to (`stashed`: the task's stashed queue before
        the run took it; its current one by default). A task's first message needs none
        (none: back to nothing)."""
        rt = self.host
        histories = rt.agent_histories
        queue = task.task_message_queue if stashed is None else stashed
        task.rollback_point = {
            "events": len(task.events),
            "histories": {
                a: len(histories[f"{task.task_id}::{a}"]) for a in histories.agents_of(task.task_id)
            },
            "queue": [dict(item) for item in queue],
        }
        rt.observer.task_changed(task)  # stored with the task's record

    # ------------------------------------------------------------------ a running task
    def apply(
        self, task: MAILTask, message: MAILMessage, strategy: str, kwargs: dict[str, Any]
    ) -> asyncio.Future[MAILMessage] | None:
        """Take `message` for `task`, which is running, with `strategy` (not ``reject``).
        Returns the future its caller waits on when the message waits (``enqueue``)."""
        if strategy == "enqueue":
            return self._enqueue(task, message, kwargs, asyncio.get_running_loop().create_future())
        rt = self.host
        task_id = task.task_id
        detail: dict[str, Any] = {
            "strategy": strategy,
            "action": "interrupted" if strategy == "interrupt" else "rolled_back",
            "message_id": message["id"],
        }
        detail["cancelled_turns"] = self._stop_turns(task_id)
        if strategy == "rollback":
            detail.update(self._roll_back(task))
        subject, body = _SUPERSEDED[strategy]
        rt.waiters.resolve(task_id, system_task_end(rt.swarm_name, task_id, subject, body))
        rt._emit(task_id, MULTITASK_EVENT, _describe(detail), detail)
        rt._new_run(task_id)
        if strategy == "interrupt":
            self.mark_start(task)
        else:
            # The same place as before: a later rollback goes back there again (its events
            # from here on).
            point = dict(task.rollback_point or {"histories": {}, "queue": []})
            point["events"] = len(task.events)
            task.rollback_point = point
            rt.observer.task_changed(task)
        rt.submit(message)
        return None

    def _stop_turns(self, task_id: str) -> list[str]:
        """Cancel the task's agent turns (each cuts its history back to where it began and
        its journal entries stay, dropped below); a turn that had not taken its messages yet
        starts again, so messages waiting for an agent are not stranded. Returns the agents
        whose turns were in flight."""
        rt = self.host
        prefix = task_id + "::"
        in_flight = sorted(k[len(prefix) :] for k in rt._turn_gates if k.startswith(prefix))
        current = asyncio.current_task()
        for turn in list(rt._turns_by_task.get(task_id, ())):
            if turn is not current:
                turn.cancel()
        if rt.journal is not None:
            rt.journal.drop_taken(task_id)
        for agent in rt.inboxes.restart_keys(prefix):
            rt._start_turn(task_id, agent)
        return in_flight

    def _roll_back(self, task: MAILTask) -> dict[str, Any]:
        """Back to the task's rollback point: its pending messages dropped, its agents'
        histories cut, its stashed queue queued again, the events since taken back."""
        rt = self.host
        task_id = task.task_id
        point = task.rollback_point or {"events": 0, "histories": {}, "queue": []}
        dropped = len(rt.mailbox.stash(task_id)) + rt.inboxes.drop_task(task_id)
        if rt.journal is not None:
            rt.journal.drop_work(task_id)
        lengths = point.get("histories") or {}
        for agent in rt.agent_histories.agents_of(task_id):
            history = rt.agent_histories[f"{task_id}::{agent}"]
            keep = int(lengths.get(agent, 0))
            if len(history) > keep:
                del history[keep:]
                rt._save_history(task_id, agent)
        queue = [dict(item) for item in point.get("queue") or []]
        if queue:
            rt.mailbox.load(queue)
        first, last = int(point.get("events") or 0) + 1, len(task.events)
        return {
            "dropped_messages": dropped,
            "rolled_back_events": {"first": str(first), "last": str(last)}
            if last >= first
            else None,
        }

    # ------------------------------------------------------------------ enqueue
    def _enqueue(
        self,
        task: MAILTask,
        message: MAILMessage,
        kwargs: dict[str, Any],
        future: asyncio.Future[MAILMessage] | None,
    ) -> asyncio.Future[MAILMessage] | None:
        rt = self.host
        task_id = task.task_id
        self._taken_up(task_id)
        queue = self._queued.setdefault(task_id, collections.deque())
        queue.append(Enqueued(message, dict(kwargs), future))
        if rt.journal is not None:
            rt.journal.enqueued(task_id, message, kwargs)
        detail = {
            "strategy": "enqueue",
            "action": "queued",
            "message_id": message["id"],
            "position": len(queue),
        }
        rt._emit(task_id, MULTITASK_EVENT, _describe(detail), detail)
        if task.state in _ENDED:
            self.task_answered(task_id)  # (restored after a restart: nothing runs it)
        return future

    def requeue(self, task: MAILTask, message: MAILMessage, kwargs: dict[str, Any]) -> None:
        """A message enqueued before a restart (its caller gone): it waits again, in order."""
        self._queued.setdefault(task.task_id, collections.deque()).append(
            Enqueued(message, dict(kwargs), None)
        )
        if task.state in _ENDED:
            self.task_answered(task.task_id)

    def waiting(self, task_id: str) -> int:
        """How many messages wait for the task's current work to end."""
        return len(self._queued.get(task_id, ()))

    def places_taken(self, task_id: str) -> int:
        """The messages waiting, and those let through to wait (`reserve`) not in yet."""
        held = self._reserved.get(task_id)
        if held:
            expired = time.monotonic() - RESERVATION_SECONDS
            while held and held[0] < expired:
                held.popleft()
            if not held:
                del self._reserved[task_id]
        return self.waiting(task_id) + len(self._reserved.get(task_id, ()))

    def reserve(self, task_id: str) -> None:
        """A request to enqueue a message was checked against the bound of waiting messages:
        its place is held until the message is enqueued (a caller's checks and its
        submission are apart: concurrent requests must not all see the same free place)."""
        self._reserved.setdefault(task_id, collections.deque()).append(time.monotonic())

    def give_back(self, task_id: str) -> None:
        """A request `reserve` let through was refused after all (its webhook, its uploads):
        its place is free again."""
        self._taken_up(task_id)

    def _taken_up(self, task_id: str) -> None:
        held = self._reserved.get(task_id)
        if held:
            held.popleft()
            if not held:
                del self._reserved[task_id]

    def task_answered(self, task_id: str) -> None:
        """The task answered: its next enqueued message goes in once the callers of this
        answer have taken it (the next pass of the loop), so what they record of it comes
        before the new message's events."""
        if task_id not in self._queued or task_id in self._delivering:
            return
        self._delivering.add(task_id)
        try:
            asyncio.get_running_loop().call_soon(self._deliver, task_id)
        except RuntimeError:  # no loop (shut down): delivered when the task is next loaded
            self._delivering.discard(task_id)

    def _deliver(self, task_id: str) -> None:
        self._delivering.discard(task_id)
        try:
            rt = self.host
        except RuntimeError:
            return
        task = rt.mail_tasks.get(task_id)
        queue = self._queued.get(task_id)
        if task is None or not queue or task.state not in _ENDED:
            return  # running again (another message), or paused: the next answer delivers
        entry = queue.popleft()
        if not queue:
            del self._queued[task_id]
        if rt.journal is not None:
            rt.journal.dequeued(task_id, entry.message["id"])
        detail = {"strategy": "enqueue", "action": "delivered", "message_id": entry.message["id"]}
        rt._emit(task_id, MULTITASK_EVENT, _describe(detail), detail)
        future = entry.future
        if future is not None and future.done():
            future = None  # its caller gave up (a timeout): the message still goes in
        if future is not None:
            rt.waiters.adopt(task_id, future)
        elif rt.journal is not None:
            rt.journal.watch_completion(task_id)
        # (A task stopped by a restart is continued the way a person continues it.)
        resume_from = "user_response" if task.state is TaskState.STOPPED else None
        try:
            rt._submit_for_task(entry.message, resume_from, entry.kwargs)
        except Exception as exc:  # noqa: BLE001 - refused now (a spent budget): say so
            logger.warning("enqueued message for task %s refused: %s", task_id, exc)
            answer = system_task_end(
                rt.swarm_name, task_id, "::task_error::", f"The enqueued message was refused: {exc}"
            )
            if future is not None and not future.done():
                future.set_result(answer)
            self.task_answered(task_id)

    def holds(self, task_id: str, future: asyncio.Future[MAILMessage]) -> bool:
        """Whether the enqueued message whose caller waits on `future` still waits."""
        return any(entry.future is future for entry in self._queued.get(task_id, ()))

    def withdraw(self, task_id: str, future: asyncio.Future[MAILMessage]) -> bool:
        """The caller of an enqueued message stops waiting (its timeout) before the message
        went in: the message is taken out, and the task's events say so. False when it went
        in already."""
        queue = self._queued.get(task_id)
        for entry in queue or ():
            if entry.future is future:
                queue.remove(entry)  # type: ignore[union-attr]
                if not queue:
                    del self._queued[task_id]
                rt = self.host
                if rt.journal is not None:
                    rt.journal.dequeued(task_id, entry.message["id"])
                detail = {
                    "strategy": "enqueue",
                    "action": "withdrawn",
                    "message_id": entry.message["id"],
                }
                rt._emit(task_id, MULTITASK_EVENT, _describe(detail), detail)
                return True
        return False

    def release_all(self, response: MAILMessage) -> None:
        """Shutdown: every caller of an enqueued message gets `response` (the messages stay
        in the journal and wait again after a restart)."""
        for queue in self._queued.values():
            for entry in queue:
                if entry.future is not None and not entry.future.done():
                    entry.future.set_result(response)


def _describe(detail: dict[str, Any]) -> str:
    strategy, action = detail["strategy"], detail["action"]
    if action == "queued":
        return f"message {detail['message_id']} enqueued (position {detail['position']})"
    if action == "delivered":
        return f"enqueued message {detail['message_id']} delivered"
    if action == "withdrawn":
        return (
            f"enqueued message {detail['message_id']} withdrawn: its caller's timeout passed "
            "before it went in"
        )
    cancelled = ", ".join(detail.get("cancelled_turns") or []) or "none"
    text = f"{strategy}: message {detail['message_id']} {action.replace('_', ' ')} the earlier one (turns cancelled: {cancelled})"
    span = detail.get("rolled_back_events")
    if span:
        text += f"; events {span['first']}-{span['last']} taken back"
    return text
