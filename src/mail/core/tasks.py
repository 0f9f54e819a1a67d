"""MAILTask: the record of one task (owner, contributors, events, stashed queue, state)."""

from __future__ import annotations

import asyncio
import datetime
import enum
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mail.core.compat import DONE
from mail.core.events import TaskEvent
from mail.core.message import MAILMessage, create_agent_address

# Pseudo task id of the runtime's own events (see MAILRuntime.runtime_events); never a task.
RUNTIME_EVENTS = "*"
# The event a strategy for a message to a running task records (core/runtime_multitask.py),
# and the answers of the messages an interrupt or a rollback superseded.
MULTITASK_EVENT = "multitask_strategy"
INTERRUPTED_SUBJECT = "::task_interrupted::"
ROLLED_BACK_SUBJECT = "::task_rolled_back::"
# The answer of an enqueued message whose caller's timeout passed before it went in.
WITHDRAWN_SUBJECT = "::message_withdrawn::"


class TaskState(enum.StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"  # was running when the server stopped; a message continues it
    WAITING_FOR_BREAKPOINT = "waiting_for_breakpoint"
    WAITING_FOR_REVIEW = "waiting_for_review"
    WAITING_FOR_BUDGET = "waiting_for_budget"
    COMPLETED = "completed"
    FAILED = "failed"  # ended on an error: `completed` is true, as for any finished task


# States in which no agent work runs: the runtime holds agent messages until a resume.
HALTED = frozenset(
    {
        TaskState.COMPLETED,
        TaskState.FAILED,
        TaskState.WAITING_FOR_BREAKPOINT,
        TaskState.WAITING_FOR_REVIEW,
        TaskState.WAITING_FOR_BUDGET,
    }
)
# States callers see as `completed: true`. A breakpoint pause answers the caller like a
# finished task (as in the original); a task waiting for review has not finished.
SHOWN_COMPLETED = frozenset(
    {
        TaskState.COMPLETED,
        TaskState.FAILED,
        TaskState.WAITING_FOR_BREAKPOINT,
        TaskState.WAITING_FOR_BUDGET,
    }
)

ANSWER_STATES = {
    "::task_complete::": TaskState.COMPLETED,
    "::task_cancelled::": TaskState.COMPLETED,
    "::breakpoint_tool_call::": TaskState.WAITING_FOR_BREAKPOINT,
    "::action_review::": TaskState.WAITING_FOR_REVIEW,
    "::budget_exceeded::": TaskState.WAITING_FOR_BUDGET,
    # A message superseded by a newer one: the task runs on with that one.
    INTERRUPTED_SUBJECT: TaskState.RUNNING,
    ROLLED_BACK_SUBJECT: TaskState.RUNNING,
    WITHDRAWN_SUBJECT: TaskState.RUNNING,  # (the task's own work goes on)
}


def state_for_answer(subject: str | None) -> TaskState:
    """The state a task enters when it answers its caller with a message of `subject`: any
    other runtime subject (``::agent_error::``, ``::task_error::``, ``::task_timeout::``,
    ``::interswarm_error::``, ...) is an error, and an agent's own subject a completion."""
    subject = subject or ""
    found = ANSWER_STATES.get(subject)
    if found is not None:
        return found
    if len(subject) > 4 and subject.startswith("::") and subject.endswith("::"):
        return TaskState.FAILED
    return TaskState.COMPLETED


def state_from_record(record: Mapping[str, Any]) -> TaskState:
    """The state of a stored task record (records written before `state` existed too)."""
    raw = record.get("state")
    if isinstance(raw, str) and raw in TaskState.__members__.values():
        state = TaskState(raw)
    elif record.get("pending_reviews"):
        state = TaskState.WAITING_FOR_REVIEW
    elif record.get("completed"):
        has_calls = bool(record.get("breakpoint_calls"))
        state = TaskState.WAITING_FOR_BREAKPOINT if has_calls else TaskState.COMPLETED
    elif record.get("is_running", True):
        state = TaskState.RUNNING
    else:
        state = TaskState.STOPPED
    # The held calls are the evidence: a review state without them is not waiting for review.
    if state is TaskState.WAITING_FOR_REVIEW and not record.get("pending_reviews"):
        state = TaskState.COMPLETED
    return state


def shown_events(events: list[Any]) -> list[Any]:
    """The events a task shows: all but those a rollback took back (the span its
    `multitask_strategy` event names; they stay in the log, so ids never repeat)."""
    spans = rolled_back_spans(events)
    if not spans:
        return events
    return [e for e in events if not in_spans(_field(e, "id"), spans)]


def rolled_back_spans(events: list[Any]) -> list[tuple[int, int]]:
    """(first, last) event ids of each span of `events` a rollback took back (`events`:
    TaskEvents, or their records)."""
    spans: list[tuple[int, int]] = []
    for event in events:
        if _field(event, "event") != MULTITASK_EVENT:
            continue
        span = _extra_data(event).get("rolled_back_events")
        if isinstance(span, dict):
            try:
                spans.append((int(span["first"]), int(span["last"])))
            except (KeyError, TypeError, ValueError):
                continue
    return spans


def in_spans(event_id: Any, spans: list[tuple[int, int]]) -> bool:
    try:
        number = int(event_id)
    except (TypeError, ValueError):
        return False
    return any(first <= number <= last for first, last in spans)


def _field(event: Any, name: str) -> Any:
    return event.get(name) if isinstance(event, Mapping) else getattr(event, name, None)


def _extra_data(event: Any) -> dict[str, Any]:
    """The ``extra_data`` of a TaskEvent, or of any event object (or record) whose ``data``
    is the JSON payload (text or dict), such as an sse-starlette ServerSentEvent."""
    if isinstance(event, TaskEvent):
        return event.extra_data
    data = _field(event, "data")
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return {}
    extra = data.get("extra_data") if isinstance(data, dict) else None
    return extra if isinstance(extra, dict) else {}


def _recipients(message: MAILMessage) -> list[Any]:
    payload: Any = message["message"]
    if message["msg_type"] in ("request", "response"):
        return [payload.get("recipient")]
    return list(payload.get("recipients") or [])


def _file_entry(kept: Any) -> bool:
    return isinstance(kept, list) and len(kept) == 2 and all(type(v) is int for v in kept)


def task_files_bytes(record: Mapping[str, Any]) -> int:
    """The bytes of the files a stored task record lists (`MAILTask.files`)."""
    files = record.get("files")
    if not isinstance(files, dict):
        return 0
    return sum(kept[0] for kept in files.values() if _file_entry(kept))


class MAILTask:
    """State of one task inside one runtime instance."""

    def __init__(
        self,
        task_id: str,
        task_owner: str,
        task_contributors: list[str] | None = None,
        *,
        start_time: datetime.datetime | None = None,
    ) -> None:
        self.task_id = task_id
        self.task_owner = task_owner
        self.task_contributors: list[str] = list(task_contributors or [task_owner])
        if task_owner not in self.task_contributors:
            self.task_contributors.insert(0, task_owner)
        self.start_time = start_time or datetime.datetime.now(datetime.UTC)
        self.events: list[TaskEvent] = []
        self.state = TaskState.RUNNING
        self.task_message_queue: list[dict[str, Any]] = []
        self.remote_swarms: set[str] = set()
        self.title: str | None = None
        self.response: dict[str, Any] | None = None
        # Action review (mail.core.runtime_review): held calls as callers see them, and the
        # reviewer's own state (the calls, decided ids) so both survive a restart.
        self.pending_reviews: list[dict[str, Any]] = []
        self.review_state: dict[str, Any] = {}
        # Where a rollback of the message working now goes back to (runtime_multitask):
        # {"events", "histories": {agent: length}, "queue"}; None: back to nothing.
        self.rollback_point: dict[str, Any] | None = None
        # Files its actions wrote under [stdlib.fs] (absolute path -> [size, mtime_ns]):
        # counted as what the task stores, and removed with it (mail.core.stored_bytes).
        self.files: dict[str, list[int]] = {}
        # The caller's `max_steps` for the task (0: unlimited; None: the loop's limit), kept
        # so that a task continued after a restart keeps it (mail.core.runtime_delivery).
        self.step_limit: int | None = None
        self._event_signal: asyncio.Event | None = None

    # -- state --------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        """Agent work of the task may be under way."""
        return self.state is TaskState.RUNNING

    @property
    def completed(self) -> bool:
        """No agent work runs (finished, or paused for a person); the runtime's view."""
        return self.state in HALTED

    @property
    def shown_completed(self) -> bool:
        """`completed` as callers see it: finished, or answered with a breakpoint pause."""
        return self.state in SHOWN_COMPLETED

    def mark_complete(self, state: TaskState = TaskState.COMPLETED) -> None:
        self.state = state if state in HALTED else TaskState.COMPLETED

    def resume(self) -> None:
        self.state = TaskState.RUNNING

    def stop(self) -> None:
        """A task that was running when its server stopped and has no work left to replay."""
        if self.state is TaskState.RUNNING:
            self.state = TaskState.STOPPED

    def queue_stash(self, items: list[dict[str, Any]] | Any) -> Awaitable[None]:
        """Keep queued items of this task until it resumes.

        `items` are mailbox items; given the runtime's mailbox instead (v1.3 passed its
        message queue), this task's items are taken out of it. v1.3 defined
        ``async def queue_stash``: the result may be awaited, or ignored.
        """
        if hasattr(items, "stash"):
            items = items.stash(self.task_id)
        self.task_message_queue.extend(items)
        return DONE

    def queue_take(self) -> list[dict[str, Any]]:
        items, self.task_message_queue = self.task_message_queue, []
        return items

    def queue_load(self, mailbox: Any) -> Awaitable[None]:
        """v1.3: put the stashed items back into the runtime's mailbox (`runtime.mailbox`)
        and mark the task running again; awaitable, like v1.3's coroutine."""
        items = self.queue_take()
        if items:
            mailbox.load(items)
            self.resume()
        return DONE

    def add_remote_swarm(self, remote_swarm: str) -> None:
        """Note a remote swarm that works on this task."""
        self.remote_swarms.add(remote_swarm)

    def add_contributor(self, contributor: str) -> None:
        if contributor not in self.task_contributors:
            self.task_contributors.append(contributor)

    # -- events -------------------------------------------------------------------------
    def add_event(self, event: TaskEvent) -> None:
        events = self.events
        event.id = str(len(events) + 1)
        events.append(event)
        if self._event_signal is not None:  # someone waits for it (a stream)
            self.wake()

    def wake(self) -> None:
        """Wake whoever waits on `event_signal` (a new event, or the task finished)."""
        signal, self._event_signal = self._event_signal, None
        if signal is not None:
            signal.set()

    def event_signal(self) -> asyncio.Event:
        """An event that is set as soon as the next task event is added (or on `wake`)."""
        if self._event_signal is None:
            self._event_signal = asyncio.Event()
        return self._event_signal

    # -- messages (v1.3's queries) --------------------------------------------------------
    def get_messages(self) -> list[MAILMessage]:
        """Every message of the task in order: the ``full_message`` of its ``new_message``
        events."""
        found: list[MAILMessage] = []
        for event in self.events:
            if event.event != "new_message":
                continue
            message = _extra_data(event).get("full_message")
            if isinstance(message, dict):
                found.append(message)  # type: ignore[arg-type]
        return found

    def get_messages_by_agent(
        self, agent: str, sent: bool = True, received: bool = True
    ) -> list[MAILMessage]:
        """The messages `agent` sent (first), then those it received."""
        address = create_agent_address(agent)
        messages = self.get_messages()
        mine = [m for m in messages if m["message"]["sender"] == address] if sent else []
        if received:
            mine += [m for m in messages if address in _recipients(m)]
        return mine

    def get_messages_by_type(self, message_type: str) -> list[MAILMessage]:
        return [m for m in self.get_messages() if m["msg_type"] == message_type]

    def get_messages_by_system(self) -> list[MAILMessage]:
        return self._messages_from("system")

    def get_messages_by_user(self) -> list[MAILMessage]:
        return self._messages_from("user")

    def _messages_from(self, address_type: str) -> list[MAILMessage]:
        return [
            m for m in self.get_messages() if m["message"]["sender"]["address_type"] == address_type
        ]

    def get_lifetime(self) -> datetime.timedelta:
        """How long ago the task started."""
        return datetime.datetime.now(datetime.UTC) - self.start_time

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self, include_events: bool = True) -> dict[str, Any]:
        record: dict[str, Any] = {
            "task_id": self.task_id,
            "task_owner": self.task_owner,
            "task_contributors": list(self.task_contributors),
            "start_time": self.start_time.isoformat(),
            "is_running": self.is_running,
            "completed": self.shown_completed,
            "state": self.state.value,
            "remote_swarms": sorted(self.remote_swarms),
            "title": self.title,
            "pending_reviews": list(self.pending_reviews),
            "task_message_queue": [
                {"priority": i["priority"], "seq": i["seq"], "message": i["message"]}
                for i in self.task_message_queue
            ],
        }
        if include_events:
            record["events"] = [e.to_record() for e in shown_events(self.events)]
        return record

    def to_store_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "task_id": self.task_id,
            "task_owner": self.task_owner,
            "task_contributors": list(self.task_contributors),
            "remote_swarms": sorted(self.remote_swarms),
            "is_running": self.is_running,
            "completed": self.shown_completed,
            "state": self.state.value,
            "title": self.title,
            "start_time": self.start_time.isoformat(),
            "pending_reviews": list(self.pending_reviews),
            "review_state": dict(self.review_state),
            "max_steps": self.step_limit,  # (written null too: records merge key by key)
        }
        if self.rollback_point is not None:
            record["rollback_point"] = self.rollback_point
        if self.files:  # (once a file is written the key stays: records merge key by key)
            record["files"] = {path: list(kept) for path, kept in self.files.items()}
        return record

    def to_db_dict(self) -> dict[str, Any]:
        """v1.3's name for `to_store_record` (the task without its events and queue)."""
        return self.to_store_record()

    @classmethod
    def from_db_dict(cls, data: dict[str, Any]) -> MAILTask:
        """v1.3's name for `from_store_record`."""
        return cls.from_store_record(data)

    @classmethod
    def from_store_record(cls, record: dict[str, Any]) -> MAILTask:
        start = record.get("start_time")
        task = cls(
            record["task_id"],
            record["task_owner"],
            list(record.get("task_contributors") or []),
            start_time=datetime.datetime.fromisoformat(start) if isinstance(start, str) else start,
        )
        task.remote_swarms = set(record.get("remote_swarms") or [])
        task.state = state_from_record(record)
        task.title = record.get("title")
        task.pending_reviews = list(record.get("pending_reviews") or [])
        task.review_state = dict(record.get("review_state") or {})
        point = record.get("rollback_point")
        task.rollback_point = point if isinstance(point, dict) else None
        limit = record.get("max_steps")
        task.step_limit = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        files = record.get("files")
        if isinstance(files, dict):
            task.files = {str(p): list(kept) for p, kept in files.items() if _file_entry(kept)}
        return task


class OpenTasks:
    """Ids of the tasks that are running or paused, without looking at every task.

    A task enters when it is created, restored or resumed, the only ways it starts to run
    (it is paused only from running). One found finished or stopped leaves when the set is
    next read: a read costs the open tasks plus those that closed since the last
    read, however many finished tasks the instance keeps (`POST /message` reads it for the
    quota of paused tasks).
    """

    __slots__ = ("_ids", "_is_open")

    def __init__(self, is_open: Callable[[str], bool]) -> None:
        self._ids: set[str] = set()
        self._is_open = is_open

    def add(self, task_id: str) -> None:
        self._ids.add(task_id)

    def ids(self) -> set[str]:
        """The open tasks now (a new set the caller may change)."""
        is_open = self._is_open
        closed = [task_id for task_id in self._ids if not is_open(task_id)]
        self._ids.difference_update(closed)
        return set(self._ids)
