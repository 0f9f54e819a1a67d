"""Bounds on how long one task's agents may keep going without finishing."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from mail.core.message import MAILMessage
from mail.core.runtime_ports import TaskLog
from mail.core.system_messages import system_task_end
from mail.core.tools import AgentToolCall

logger = logging.getLogger("mail.runtime")

DEFAULT_TASK_TURN_LIMIT = 500
DEFAULT_TASK_REPEAT_LIMIT = 5
DEFAULT_TASK_NO_TOOL_CALL_LIMIT = 3
TASK_ERROR_SUBJECT = "::task_error::"
NO_TOOL_CALL = "no_tool_call"  # the error_kind of a task stopped by that rule
# What a user can do about it: raising the limit only buys more such answers.
NO_TOOL_CALL_HINT = (
    "Its model does not call the tools it is given: use a model that calls tools reliably, "
    "or check that its server gives this model tool calls "
    "(docs/troubleshooting.md, 'A small local model')."
)


@dataclass(slots=True)
class _Repeat:
    signature: tuple[str, str] | None = None
    count: int = 0


@dataclass
class LoopGuard:
    """Counts turns per task, and repeated failing calls and answers without a valid tool
    call per (task, agent)."""

    # None (or 0) = no bound.
    max_turns: int | None = DEFAULT_TASK_TURN_LIMIT
    max_repeats: int | None = DEFAULT_TASK_REPEAT_LIMIT
    max_no_tool_calls: int | None = DEFAULT_TASK_NO_TOOL_CALL_LIMIT
    _turns: dict[str, int] = field(default_factory=dict)
    _repeats: dict[tuple[str, str], _Repeat] = field(default_factory=dict)
    # (task, agent) -> its answers in a row without a valid tool call; empty in most
    # runtimes, so a turn with a valid call need not record it (see runtime_turns)
    answers_in_a_row: dict[tuple[str, str], int] = field(default_factory=dict)

    def begin_turn(self, task_id: str) -> str | None:
        """Count a turn of `task_id`; the reason to stop instead, if it is over the bound."""
        turns = self._turns.get(task_id, 0) + 1
        self._turns[task_id] = turns
        if self.max_turns and turns > self.max_turns:
            return (
                f"Task stopped: its agents took more than {self.max_turns} turns without "
                "completing it (task_turn_limit). The task may be stuck in a loop."
            )
        return None

    def record_call(
        self, task_id: str, agent_name: str, call: AgentToolCall, result: str | None
    ) -> str | None:
        """Note one handled call; the reason to stop the task if it repeats a failure."""
        failed = isinstance(result, str) and result.startswith("ERROR")
        if not failed:
            if self._repeats:  # most runtimes never had a failing call: no key to build
                self._repeats.pop((task_id, agent_name), None)
            return None
        key = (task_id, agent_name)
        signature = (call.tool_name, _canonical(call.tool_args))
        state = self._repeats.setdefault(key, _Repeat())
        if state.signature == signature:
            state.count += 1
        else:
            state.signature, state.count = signature, 1
        if self.max_repeats and state.count >= self.max_repeats:
            return (
                f"Task stopped: agent '{agent_name}' made the same failing call "
                f"`{call.tool_name}` {state.count} times in a row (task_repeat_limit); "
                f"last result: {result}"
            )
        return None

    def record_answer(self, task_id: str, agent_name: str, problem: str | None) -> str | None:
        """Note one model answer: `problem` says why it had no valid tool call (None: it had
        one). The reason to stop the task when that happened too many times in a row."""
        key = (task_id, agent_name)
        if problem is None:
            if self.answers_in_a_row:
                self.answers_in_a_row.pop(key, None)
            return None
        count = self.answers_in_a_row[key] = self.answers_in_a_row.get(key, 0) + 1
        if self.max_no_tool_calls and count >= self.max_no_tool_calls:
            return (
                f"Task stopped: agent '{agent_name}' answered {count} times in a row without "
                f"a valid tool call (task_no_tool_call_limit); the last time it answered "
                f"{problem}. {NO_TOOL_CALL_HINT}"
            )
        return None

    def forget(self, task_id: str) -> None:
        self._turns.pop(task_id, None)
        for books in (self._repeats, self.answers_in_a_row):
            if books:  # most runtimes never had a failing call nor a bad answer
                for key in [k for k in books if k[0] == task_id]:
                    del books[key]


def _canonical(args: Any) -> str:
    try:
        return json.dumps(args, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(args)


def stop_task(
    rt: TaskLog,
    task_id: str,
    reason: str,
    kind: str | None = None,
    subject: str = TASK_ERROR_SUBJECT,
) -> None:
    """End a running task on an error: a `task_error` event (with `kind` as its error_kind),
    a `subject` response saying `reason`, and a notice to the other swarms."""
    task = rt.mail_tasks.get(task_id)
    if task is None or task.completed:
        return
    logger.warning("stopping task %s: %s", task_id, reason)
    rt._emit(task_id, "task_error", reason, {"error_kind": kind} if kind else None)
    end_task(rt, task_id, system_task_end(rt.swarm_name, task_id, subject, reason))


def end_task(rt: TaskLog, task_id: str, response: MAILMessage) -> None:
    """Complete a task that did not finish by itself (an error, a caller's timeout).

    Its queued messages are stashed, waiters get `response`, `is_running` turns false, and
    the other swarms taking part are told the task is over.
    """
    task = rt.mail_tasks.get(task_id)
    if task is None or task.completed:
        return
    rt._complete_task(task_id, response)
    if rt.interswarm is not None:
        rt.interswarm.task_failed(task_id, response)
