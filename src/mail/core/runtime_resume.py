"""Submitting into a task: new tasks, multi-turn reuse, and the resume forms (`Submissions`)."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Protocol

from mail.core.message import MAILMessage
from mail.core.review import ReviewDecisionError
from mail.core.runtime_multitask import DEFAULT_STRATEGY, STRATEGIES, STRATEGY_KWARG
from mail.core.runtime_ports import HostLink, Swarm, TurnLocks
from mail.core.system_messages import system_broadcast
from mail.core.tasks import TaskState
from mail.telemetry.budget import BudgetError

if TYPE_CHECKING:
    import asyncio

    from mail.core.runtime_delivery import StepBudget
    from mail.core.runtime_multitask import Multitask
    from mail.core.tasks import MAILTask
    from mail.telemetry.meter import TaskMeter

RESUME_FORMS = ("user_response", "breakpoint_tool_call", "action_review")
# The submissions that are a caller's message to the task (a multitask strategy applies
# when the task is still running).
CALLER_MESSAGES = (None, "user_response")
BREAKPOINT_ANSWERED_BY_MESSAGE = (
    "No result was given for this call: the user answered with a message instead (it follows)."
)


class TaskSubmitError(Exception):
    """A submission that cannot be accepted (unknown task, bad resume payload, ...).

    ``status`` is the HTTP status a server answers with when it meets this error.
    """

    status = 400


class TaskNotFoundError(TaskSubmitError):
    """The submission names a task this instance does not have."""

    status = 404


class MessageTooLargeError(TaskSubmitError):
    """The message body is longer than the runtime's ``max_message_body``."""

    status = 413


def message_too_large(length: int, limit: int) -> str:
    return f"the message body is {length} characters long; the limit is {limit} (max_message_body)"


class TaskConflictError(TaskSubmitError):
    """The task is in the wrong state for the submission (running, or not paused)."""

    status = 409


def strategy_of(kwargs: dict[str, Any]) -> str:
    """The multitask strategy a submission asks for (``kwargs["multitask_strategy"]``,
    ``reject`` without one); see core/runtime_multitask.py."""
    value = kwargs.get(STRATEGY_KWARG)
    if value is None:
        return DEFAULT_STRATEGY
    if value not in STRATEGIES:
        raise TaskSubmitError(
            f"multitask_strategy must be one of {', '.join(STRATEGIES)}, got {value!r}"
        )
    return str(value)


def parse_max_steps(value: Any) -> int | None:
    """A per-task step limit: a non-negative integer; ``None`` or 0 mean unlimited.

    The same meaning as ``task_message_limit`` in mail.toml, so one number means one thing.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)  # Python callers of the original passed numeric strings
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskSubmitError(
            f"max_steps must be an int or null (a non-negative integer; 0 or null means "
            f"unlimited), got {value!r}"
        )
    if value < 0:
        raise TaskSubmitError(
            f"max_steps must be an int or null (a non-negative integer; 0 or null means "
            f"unlimited), got {value}"
        )
    return value or None


class Reviewing(Protocol):
    """The submit side of action review (`ActionReviewer`)."""

    def check_submit(self, task_id: str, resume_from: str | None) -> None: ...
    def validate(self, task_id: str, raw_decisions: Any) -> Any: ...
    def resume(self, task_id: str, kwargs: dict[str, Any]) -> None: ...


class ResumeHost(Swarm, TurnLocks, Protocol):
    """What submissions use of the runtime."""

    @property
    def meter(self) -> TaskMeter: ...

    @property
    def review(self) -> Reviewing: ...
    @property
    def multitask(self) -> Multitask: ...
    @property
    def _shutdown(self) -> bool: ...

    def submit(self, message: MAILMessage) -> object: ...  # the result is not used
    def _turn_held(self, key: str) -> bool: ...


class Submissions(HostLink[ResumeHost]):
    """Task submission semantics: checks, continuations, and the resume forms."""

    def __init__(self, host: ResumeHost, steps: StepBudget) -> None:
        self._link(host)
        self.steps = steps

    def submit_for_task(
        self, message: MAILMessage, resume_from: str | None, kwargs: dict[str, Any]
    ) -> asyncio.Future[MAILMessage] | None:
        """Submit a caller's `message` into its task. Returns the future its caller waits on
        instead of the task's next answer (an enqueued message's), else None."""
        rt = self.host
        task_id = message["message"]["task_id"]
        if rt._shutdown:
            raise TaskSubmitError("the runtime is shut down")
        limit = rt.max_message_body
        body = message["message"]["body"]
        if limit and isinstance(body, str) and len(body) > limit:
            raise MessageTooLargeError(message_too_large(len(body), limit))
        self.check_submission(task_id, resume_from, kwargs)
        task = rt.mail_tasks.get(task_id)
        running = task is not None and task_is_running(task)
        if running and resume_from in CALLER_MESSAGES:
            # Not `reject` (check_submission refused it): the task takes the message now
            # (interrupt, rollback) or once its current work ends (enqueue).
            strategy = strategy_of(kwargs)
            if strategy != "enqueue":
                self._take_settings(task_id, kwargs)
            assert task is not None
            return rt.multitask.apply(task, message, strategy, kwargs)
        self._take_settings(task_id, kwargs)
        # Where a rollback of this message goes back to: the task's stashed queue as it is
        # now (resuming queues it again), the rest once a pause it closes is closed.
        stashed = list(task.task_message_queue) if task is not None else None
        if resume_from is None:
            if task is not None and task.completed:
                # A new message on a finished task continues it (multi-turn).
                self.resume_task(task_id)
        elif resume_from == "user_response":
            self.resume_task(task_id)
        if resume_from in CALLER_MESSAGES:
            if task is not None and stashed is not None:
                rt.multitask.mark_start(task, stashed)
            rt.submit(message)
        elif resume_from == "breakpoint_tool_call":
            self.resume_breakpoint(task_id, kwargs)
        elif resume_from == "action_review":
            rt.review.resume(task_id, kwargs)
        else:
            raise TaskSubmitError(
                f"invalid resume_from '{resume_from}': expected one of {', '.join(RESUME_FORMS)}"
            )
        return None

    def _take_settings(self, task_id: str, kwargs: dict[str, Any]) -> None:
        """The message's own step limit and budget apply to the task from now on."""
        if "max_steps" in kwargs:
            limit = parse_max_steps(kwargs["max_steps"]) or 0  # (0: no limit)
            task = self.host._ensure_task(task_id)
            if task.step_limit != limit:
                task.step_limit = limit  # kept with the task, so it holds after a restart
                self.host.observer.task_changed(task)
        self.host.meter.submitted(task_id, kwargs)

    def resume_task(self, task_id: str) -> None:
        rt = self.host
        task = rt.mail_tasks[task_id]
        if task.state is TaskState.WAITING_FOR_BREAKPOINT:
            # Continued by a message rather than a breakpoint resume: close the pause.
            self.close_breakpoint_pause(task_id)
        self.steps.restart(task_id)
        rt.response_messages.pop(task_id, None)
        task.resume()
        rt.open_tasks.add(task_id)
        task.response = None
        rt.mailbox.load(task.queue_take())
        rt.observer.task_changed(task)
        rt.observer.queue_stashed(task_id, [])

    def close_breakpoint_pause(self, task_id: str) -> None:
        """Give every call the task is paused on a result saying a message came instead.

        Every tool call in a history needs a result (providers reject histories without
        one), and the pause is over: `pending_breakpoints` empties and a late breakpoint
        resume is a 409. The results are written before the caller's next turn: at once when
        no turn of the caller runs, else under its turn lock, queued ahead of the next turn.
        """
        rt = self.host
        calls = rt.last_breakpoint_tool_calls.pop(task_id, None) or []
        caller = rt.last_breakpoint_caller.get(task_id)
        if not calls or not caller:
            return
        ids = ", ".join(c.tool_call_id for c in calls)
        rt._emit(
            task_id,
            "breakpoint_action_complete",
            f"breakpoint call(s) {ids} of {caller} closed: {BREAKPOINT_ANSWERED_BY_MESSAGE}",
            {"caller": caller, "tool_call_ids": [c.tool_call_id for c in calls]},
        )
        key = f"{task_id}::{caller}"

        def close() -> None:
            history = rt.history_for(task_id, caller)
            for call in calls:
                history.append(call.create_response_msg(BREAKPOINT_ANSWERED_BY_MESSAGE))
            rt._save_history(task_id, caller)

        if not rt._turn_held(key):
            close()
            return

        async def close_in_turn() -> None:
            async with rt._in_turn(key):
                close()

        rt._spawn(task_id, close_in_turn())

    def pending_breakpoints(self, task_id: str) -> list[dict[str, Any]]:
        """The breakpoint calls `task_id` is paused on (empty when it is not paused).

        Shown on task records so a client can offer the resume form without reading the
        event log (GET /tasks lists summaries without events).
        """
        rt = self.host
        task = rt.mail_tasks.get(task_id)
        calls = rt.last_breakpoint_tool_calls.get(task_id) or []
        if task is None or task.state is not TaskState.WAITING_FOR_BREAKPOINT or not calls:
            return []
        caller = rt.last_breakpoint_caller.get(task_id)
        return [
            {
                "tool_call_id": c.tool_call_id,
                "tool_name": c.tool_name,
                "tool_args": c.tool_args,
                "caller": caller,
            }
            for c in calls
        ]

    def check_submission(
        self, task_id: str, resume_from: str | None, kwargs: dict[str, Any]
    ) -> None:
        """Raise the TaskSubmitError this submission would meet; change nothing.

        Synchronous, so a caller that checks and then submits without awaiting in between
        (the server) sees the same answer the submission would get.
        """
        rt = self.host
        if "max_steps" in kwargs:
            parse_max_steps(kwargs["max_steps"])
        try:
            rt.meter.check_submission(task_id, kwargs, resume_from in (None, "user_response"))
        except BudgetError as exc:
            raise (TaskConflictError if exc.status == 409 else TaskSubmitError)(str(exc)) from None
        rt.review.check_submit(task_id, resume_from)  # a task waiting for review: 409
        task = rt.mail_tasks.get(task_id)
        if resume_from in CALLER_MESSAGES:
            if resume_from == "user_response" and task is None:
                raise TaskNotFoundError(f"task '{task_id}' not found")
            if strategy_of(kwargs) == "reject" and task is not None and task_is_running(task):
                raise TaskConflictError(
                    f"task '{task_id}' is still running; wait for its answer (or stream it) "
                    "before sending it another message, or send it with a multitask_strategy "
                    "(enqueue, interrupt, rollback)"
                )
        elif resume_from == "breakpoint_tool_call":
            self.plan_breakpoint_results(task_id, kwargs)
        elif resume_from == "action_review":
            if task is None:
                raise TaskNotFoundError(f"task '{task_id}' not found")
            try:
                rt.review.validate(task_id, kwargs.get("decisions"))
            except ReviewDecisionError as exc:
                raise TaskSubmitError(str(exc)) from None
        else:
            raise TaskSubmitError(
                f"invalid resume_from '{resume_from}': expected one of {', '.join(RESUME_FORMS)}"
            )

    def plan_breakpoint_results(
        self, task_id: str, kwargs: dict[str, Any]
    ) -> tuple[str, list[tuple[Any, Any]]]:
        """(caller, [(paused call, result content)]) for a breakpoint resume, or raise."""
        rt = self.host
        task = rt.mail_tasks.get(task_id)
        if task is None:
            raise TaskNotFoundError(f"task '{task_id}' not found")
        calls = list(rt.last_breakpoint_tool_calls.get(task_id, []))
        if task.state is not TaskState.WAITING_FOR_BREAKPOINT or not calls:
            state = "still running" if task_is_running(task) else "not paused at a breakpoint"
            raise TaskConflictError(
                f"task '{task_id}' is {state}; resume_from 'breakpoint_tool_call' needs a task "
                "that a breakpoint tool paused (each pause takes exactly one resume)"
            )
        if "breakpoint_tool_call_result" not in kwargs:
            raise TaskSubmitError(
                "resuming from a breakpoint requires 'breakpoint_tool_call_result' in kwargs"
            )
        caller = kwargs.get("breakpoint_tool_caller") or rt.last_breakpoint_caller.get(task_id)
        if not caller or caller not in rt.agents:
            raise TaskSubmitError(f"no breakpoint tool caller is known for task '{task_id}'")
        result = kwargs["breakpoint_tool_call_result"]
        if isinstance(result, str):
            with contextlib.suppress(json.JSONDecodeError):
                result = json.loads(result)
        if (
            isinstance(result, list)
            and len(result) == 1
            and len(calls) == 1
            and isinstance(result[0], dict)
            and "call_id" not in result[0]
            and "content" in result[0]
        ):
            result = result[0]  # one result for the one paused call: no call_id needed
        waiting = [c.tool_call_id for c in calls]
        if isinstance(result, list):
            return caller, _match_by_call_id(calls, result)
        if isinstance(result, dict) and "content" in result:
            if len(calls) != 1:
                raise TaskSubmitError(
                    f"{len(calls)} breakpoint tool calls are waiting for results "
                    f"({', '.join(waiting)}); pass breakpoint_tool_call_result as a list of "
                    "{call_id, content} items, but only one call response was provided."
                )
            return caller, [(calls[0], result["content"])]
        if len(calls) != 1:
            raise TaskSubmitError(
                f"{len(calls)} breakpoint tool calls are waiting for results "
                f"({', '.join(waiting)}); pass breakpoint_tool_call_result as a list of "
                "{call_id, content} items, one per call"
            )
        text = result if isinstance(result, str) else json.dumps(result)
        return caller, [(calls[0], text)]

    def resume_breakpoint(self, task_id: str, kwargs: dict[str, Any]) -> None:
        rt = self.host
        caller, results = self.plan_breakpoint_results(task_id, kwargs)
        history = rt.history_for(task_id, caller)
        for call, content in results:
            self._inject_breakpoint_result(task_id, caller, history, call, content)
        # Stored now: a restart before the caller's next turn ends must still show it these.
        rt._save_history(task_id, caller)
        rt.last_breakpoint_tool_calls.pop(task_id, None)
        self.resume_task(task_id)
        rt.mailbox.put(
            system_broadcast(rt.swarm_name, task_id, [caller], "::action_complete_broadcast::", "")
        )

    def _inject_breakpoint_result(
        self,
        task_id: str,
        caller: str,
        history: list[dict[str, Any]],
        call: Any,
        content: Any,
    ) -> None:
        text = content if isinstance(content, str) else json.dumps(content)
        history.append(call.create_response_msg(text))
        self.host._emit(
            task_id,
            "breakpoint_action_complete",
            f"breakpoint action complete (caller = {caller}):\n{text}",
        )


def task_is_running(task: MAILTask) -> bool:
    """Work of the task may still be under way (an interrupted, restored task is not)."""
    return not task.completed and task.is_running


def _match_by_call_id(calls: list[Any], items: list[Any]) -> list[tuple[Any, Any]]:
    """Pair each paused call with its ``{call_id, content}`` item; every call needs one."""
    by_id = {c.tool_call_id: c for c in calls}
    given: dict[str, Any] = {}
    unknown: list[str] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("call_id"), str):
            raise TaskSubmitError(
                f"breakpoint_tool_call_result[{index}] must be an object with a string "
                "'call_id' and a 'content'"
            )
        call_id = item["call_id"]
        if call_id not in by_id:
            unknown.append(call_id)
        elif call_id in given:
            raise TaskSubmitError(f"breakpoint_tool_call_result names call_id '{call_id}' twice")
        else:
            given[call_id] = item.get("content", "")
    missing = [c for c in by_id if c not in given]
    problems: list[str] = []
    if unknown:
        problems.append(f"unknown call_id(s): {', '.join(unknown)}")
    if missing:
        problems.append(f"no result for call_id(s): {', '.join(missing)}")
    if problems:
        raise TaskSubmitError(
            "breakpoint_tool_call_result does not match the paused calls ("
            + "; ".join(problems)
            + f"); the calls waiting for results are: {', '.join(by_id)}"
        )
    return [(by_id[c], content) for c, content in given.items()]  # in the caller's order
