"""Run a MAIL message for a caller and watch its events, as ``POST /message`` with
``stream: true`` does, without the HTTP response around it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mail.core.events import TaskEvent
from mail.server import messaging
from mail.server.bodies import MessageRequest


async def run_events(
    state: Any,
    caller: Any,
    req: MessageRequest,
    on_submitted: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[TaskEvent]:
    """The task's events for this message, ending with ``task_complete`` or ``task_error``.

    ``on_submitted`` is awaited once the message is in the caller's instance and committed
    (its MAIL task exists and is stored), before the first event."""
    admitted = await messaging.admit(state, caller, req)
    inst = admitted.inst
    timeout = req.timeout if req.timeout is not None else state.config.settings.message_timeout
    events = inst.swarm.stream_events(
        req.body,
        timeout=timeout,
        ping_interval=state.config.settings.sse_ping_interval,
        on_stored=on_submitted,
        **messaging.submit_kwargs(req),
    )
    try:
        async with state.instances.lease(inst):
            async for event in events:
                admitted.release()  # submitted: the task's state answers
                if event.id is None and event.event in ("task_complete", "task_error"):
                    # In the caller's books at once, as an answer over HTTP is: the task stays
                    # in memory until the sweep, and the caller's next send must see it.
                    finished = getattr(state, "finished", None)
                    if finished is not None:
                        finished.count(inst, req.task_id)
                yield event
    finally:
        admitted.release()


def was_cancelled(state: Any, caller: Any, task_id: str) -> bool:
    """Whether one of the caller's MAIL tasks ended by being cancelled (and stayed so)."""
    from mail.a2a.cancel import CANCELLED_SUBJECT
    from mail.core.tasks import TaskState

    inst = state.instances.peek(caller.role, caller.id)
    task = inst.swarm.get_task_by_id(task_id) if inst is not None else None
    if task is None or task.state is not TaskState.COMPLETED:
        return False
    response = getattr(task, "response", None) or {}
    return bool(response.get("message", {}).get("subject") == CANCELLED_SUBJECT)
