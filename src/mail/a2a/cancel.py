"""Cancelling a MAIL task: the task stops, its agents are not called again, the log says so."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import HTTPException

from mail.core.loop_guard import end_task
from mail.core.system_messages import system_task_end
from mail.core.tasks import TaskState

logger = logging.getLogger("mail.a2a")

CANCELLED_SUBJECT = "::task_cancelled::"
CANCELLED_BODY = "The task was cancelled."


def cancel_task(runtime: Any, task_id: str, reason: str = "cancelled by the caller") -> bool:
    """Stop `task_id` on `runtime`; False when there was nothing to stop (already finished).

    Raises KeyError for an unknown task.
    """
    task = runtime.mail_tasks.get(task_id)
    if task is None:
        raise KeyError(task_id)
    paused = task.state in (TaskState.WAITING_FOR_BREAKPOINT, TaskState.WAITING_FOR_REVIEW)
    if task.state in (TaskState.COMPLETED, TaskState.FAILED):
        return False
    response = system_task_end(runtime.swarm_name, task_id, CANCELLED_SUBJECT, CANCELLED_BODY)
    if paused:
        if task.state is TaskState.WAITING_FOR_BREAKPOINT:
            runtime.submissions.close_breakpoint_pause(task_id)
        task.pending_reviews = []
        task.review_state = {}
        task.state = TaskState.COMPLETED
        task.response = response
        runtime.response_messages[task_id] = response
        runtime.observer.task_changed(task)
        runtime.observer.response_set(task_id, response)
    else:
        end_task(runtime, task_id, response)
    runtime._emit(task_id, "task_cancelled", f"task cancelled: {reason}", {"reason": reason})
    for turn in list(runtime._turns_by_task.get(task_id, ())):
        if turn is not _current():
            turn.cancel()
    task.wake()
    logger.info("task %s cancelled (%s)", task_id, reason)
    return True


def _current() -> Any:
    import asyncio

    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


async def cancel_caller_task(
    state: Any,
    caller: Any,
    task_id: str,
    reason: str = "cancelled by the caller",
    *,
    retried: bool = False,
) -> dict[str, Any]:
    """Cancel one of the caller's tasks: ``{"task_id", "cancelled", "state"}``; 404 if unknown.

    `retried`: a keyed cancel whose first attempt died after taking its key (its server was
    killed), which may have cancelled the task already: a task whose answer is still the
    cancel's is ``"cancelled": true``, as that attempt would have answered."""
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    inst.touch()
    runtime = inst.swarm.runtime
    try:
        cancelled = cancel_task(runtime, task_id, reason)
    except KeyError:
        finished = await _finished_state(state, inst, caller, task_id, retried)
        if finished is None:
            raise HTTPException(404, f"task '{task_id}' not found") from None
        return {"task_id": task_id, "cancelled": finished[1], "state": finished[0]}
    inst.claimed_tasks.pop(task_id, None)
    task = runtime.mail_tasks[task_id]
    cancelled = cancelled or (retried and _ended_cancelled(task.response))
    if cancelled:
        # Acknowledged means stored: the cancel (the task's end, its answer and its
        # task_cancelled event) is committed before the caller hears of it; a kill -9 right
        # after the answer brought a paused task back paused.
        await inst.swarm.flush_before_answer()
    return {"task_id": task_id, "cancelled": cancelled, "state": task.state.value}


async def _finished_state(
    state: Any, inst: Any, caller: Any, task_id: str, retried: bool
) -> tuple[str, bool] | None:
    """The state of one of the caller's tasks that finished and left its instance's memory
    (kept by the store, or archived with the memory store), and, when `retried`, whether its
    answer is a cancel's; None: no such task of theirs."""
    archived = state.instances.archived_tasks(caller.role, caller.id).get(task_id)
    if archived is not None:
        ended = retried and _ended_cancelled(archived.get("response"))
        return str(archived.get("state") or TaskState.COMPLETED.value), ended
    finished = getattr(state, "finished", None)
    if finished is None or task_id == "*":
        return None
    stored = await finished.stored_task(inst.kind, inst.id, task_id)
    if stored is None:
        return None
    return stored.state.value, retried and _ended_cancelled(stored.response)


def _ended_cancelled(response: Any) -> bool:
    """Whether a task's answer is the one a cancel gives it."""
    message = response.get("message") if isinstance(response, dict) else None
    return isinstance(message, dict) and message.get("subject") == CANCELLED_SUBJECT
