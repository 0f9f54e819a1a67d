"""Letting a finished task leave a runtime's memory (its store still has it)."""

from __future__ import annotations

import collections
from typing import Any, Protocol

from mail.core.agent_histories import SEPARATOR, AgentHistories
from mail.core.runtime_ports import TaskLog
from mail.core.tasks import MAILTask, TaskState

# States a task may be forgotten in: it neither runs nor waits for anyone.
FINISHED = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.STOPPED})
# Ids of forgotten tasks a runtime remembers (late messages for them are dropped).
REMEMBERED_IDS = 10_000


class FinishedHost(TaskLog, Protocol):
    """What forgetting a task touches of the runtime (its per-task books)."""

    @property
    def agent_histories(self) -> dict[str, list[dict[str, Any]]]: ...
    @property
    def outstanding_requests(self) -> dict[str, dict[str, int]]: ...
    @property
    def waiters(self) -> Any: ...
    @property
    def journal(self) -> Any: ...
    @property
    def delivery(self) -> Any: ...
    @property
    def loop_guard(self) -> Any: ...
    @property
    def meter(self) -> Any: ...
    @property
    def forgotten_tasks(self) -> collections.OrderedDict[str, None]: ...

    def task_is_busy(self, task_id: str) -> bool: ...
    def _turn_held(self, key: str) -> bool: ...


def is_finished(task: MAILTask) -> bool:
    return task.state in FINISHED


def can_forget(rt: FinishedHost, task_id: str) -> bool:
    """Finished, and nothing of the runtime still works on it or waits for it."""
    task = rt.mail_tasks.get(task_id)
    if task is None or not is_finished(task) or rt.task_is_busy(task_id):
        return False
    if rt.waiters.futures.get(task_id):
        return False
    journal = rt.journal
    if journal is not None and journal.entries(task_id):
        return False
    prefix = f"{task_id}::"
    return not any(rt._turn_held(prefix + agent) for agent in _agents_of(rt, prefix))


def forget_finished(rt: FinishedHost, task_id: str) -> MAILTask | None:
    """Drop a finished task and everything the runtime keeps for it; returns the task, or
    None (and changes nothing) when it cannot go yet (see `can_forget`)."""
    if not can_forget(rt, task_id):
        return None
    task = rt.mail_tasks.pop(task_id)
    histories = rt.agent_histories
    if isinstance(histories, AgentHistories):
        histories.drop_task(task_id)
    else:  # replaced by a plain dict
        prefix = f"{task_id}::"
        for key in [k for k in histories if k.startswith(prefix)]:
            del histories[key]
    rt.response_messages.pop(task_id, None)
    rt.outstanding_requests.pop(task_id, None)
    rt.last_breakpoint_caller.pop(task_id, None)
    rt.last_breakpoint_tool_calls.pop(task_id, None)
    rt.delivery.steps.restart(task_id)
    rt.loop_guard.forget(task_id)
    rt.meter.forget(task_id)
    rt.stored_bytes.forget(task_id)
    forgotten = rt.forgotten_tasks
    forgotten[task_id] = None
    forgotten.move_to_end(task_id)
    while len(forgotten) > REMEMBERED_IDS:
        forgotten.popitem(last=False)
    return task


def _agents_of(rt: FinishedHost, prefix: str) -> list[str]:
    histories = rt.agent_histories
    if isinstance(histories, AgentHistories):  # the task's own keys, not a scan of all
        return histories.agents_of(prefix[: -len(SEPARATOR)])
    return [k[len(prefix) :] for k in histories if k.startswith(prefix)]
