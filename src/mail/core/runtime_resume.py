"""Submitting into a task: new tasks, multi-turn reuse, and the two resume forms."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from mail.core.system_messages import system_broadcast

if TYPE_CHECKING:
    from mail.core.message import MAILMessage
    from mail.core.runtime import MAILRuntime

RESUME_FORMS = ("user_response", "breakpoint_tool_call", "action_review")


class TaskSubmitError(Exception):
    """A submission that cannot be accepted (unknown task, bad resume payload, ...)."""


def parse_max_steps(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TaskSubmitError("max_steps must be an int or null") from None


class ResumeMixin:
    """Task submission semantics (mixed into MAILRuntime)."""

    def _submit_for_task(
        self: MAILRuntime, message: MAILMessage, resume_from: str | None, kwargs: dict[str, Any]
    ) -> None:
        task_id = message["message"]["task_id"]
        if self._shutdown:
            raise TaskSubmitError("the runtime is shut down")
        self.review.check_submit(task_id, resume_from)
        if "max_steps" in kwargs:
            self._step_limits[task_id] = parse_max_steps(kwargs["max_steps"])
        if resume_from is None:
            task = self.mail_tasks.get(task_id)
            if task is not None and task.completed:
                # A new message on a finished task continues it (multi-turn).
                self._resume_task(task_id)
            self.submit(message)
        elif resume_from == "user_response":
            if task_id not in self.mail_tasks:
                raise TaskSubmitError(f"task '{task_id}' not found")
            self._resume_task(task_id)
            self.submit(message)
        elif resume_from == "breakpoint_tool_call":
            self._resume_breakpoint(task_id, kwargs)
        elif resume_from == "action_review":
            self.review.resume(task_id, kwargs)
        else:
            raise TaskSubmitError(
                f"invalid resume_from '{resume_from}': expected one of {', '.join(RESUME_FORMS)}"
            )

    def _resume_task(self: MAILRuntime, task_id: str) -> None:
        task = self.mail_tasks[task_id]
        self._step_counts.pop(task_id, None)
        self.response_messages.pop(task_id, None)
        task.resume()
        task.response = None
        self.mailbox.load(task.queue_take())
        self.observer.task_changed(task)
        self.observer.queue_stashed(task_id, [])

    def _resume_breakpoint(self: MAILRuntime, task_id: str, kwargs: dict[str, Any]) -> None:
        if task_id not in self.mail_tasks:
            raise TaskSubmitError(f"task '{task_id}' not found")
        if "breakpoint_tool_call_result" not in kwargs:
            raise TaskSubmitError(
                "resuming from a breakpoint requires 'breakpoint_tool_call_result' in kwargs"
            )
        caller = kwargs.get("breakpoint_tool_caller") or self.last_breakpoint_caller.get(task_id)
        if not caller or caller not in self.agents:
            raise TaskSubmitError(f"no breakpoint tool caller is known for task '{task_id}'")
        result = kwargs["breakpoint_tool_call_result"]
        if isinstance(result, str):
            try:
                result = json.loads(result)
            except json.JSONDecodeError:
                pass
        calls = list(self.last_breakpoint_tool_calls.get(task_id, []))
        history = self.history_for(task_id, caller)
        matched = False
        if (
            isinstance(result, list)
            and len(result) == 1
            and len(calls) == 1
            and isinstance(result[0], dict)
            and "call_id" not in result[0]
            and "content" in result[0]
        ):
            result = result[0]  # one result for the one paused call: no call_id needed
        if isinstance(result, list):
            by_id = {c.tool_call_id: c for c in calls}
            for item in result:
                if isinstance(item, dict) and item.get("call_id") in by_id:
                    self._inject_breakpoint_result(
                        task_id, caller, history, by_id[item["call_id"]], item.get("content", "")
                    )
                    matched = True
        elif isinstance(result, dict) and "content" in result:
            if len(calls) != 1:
                raise TaskSubmitError(
                    f"{len(calls)} breakpoint tool calls are waiting for results; pass "
                    "breakpoint_tool_call_result as a list of {call_id, content} items, "
                    "but only one call response was provided."
                )
            self._inject_breakpoint_result(task_id, caller, history, calls[0], result["content"])
            matched = True
        if not matched:
            text = result if isinstance(result, str) else json.dumps(result)
            if len(calls) == 1:
                self._inject_breakpoint_result(task_id, caller, history, calls[0], text)
            else:
                # Several calls and nothing matched: give each call the raw payload so the
                # conversation stays valid for the provider (every call needs a result).
                for call in calls:
                    self._inject_breakpoint_result(task_id, caller, history, call, text)
        self.last_breakpoint_tool_calls.pop(task_id, None)
        self._resume_task(task_id)
        self.mailbox.put(
            system_broadcast(
                self.swarm_name, task_id, [caller], "::action_complete_broadcast::", ""
            )
        )

    def _inject_breakpoint_result(
        self: MAILRuntime,
        task_id: str,
        caller: str,
        history: list[dict[str, Any]],
        call: Any,
        content: Any,
    ) -> None:
        text = content if isinstance(content, str) else json.dumps(content)
        history.append(call.create_response_msg(text))
        self._emit(
            task_id,
            "breakpoint_action_complete",
            f"breakpoint action complete (caller = {caller}):\n{text}",
        )
