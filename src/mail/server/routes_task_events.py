"""``GET /task/events``: resubscribe to a task's SSE stream (owner or admin)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from mail.server import task_events
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.bodies import parse_task_id
from mail.server.handlers import get_state
from mail.server.sse import EventStreamResponse

router = APIRouter()


@router.get("/task/events")
async def task_event_stream(
    request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> EventStreamResponse:
    state = get_state(request)
    task_id = parse_task_id({}, request.query_params.get("task_id"))
    after = task_events.parse_after(
        request.headers.get("last-event-id"), request.query_params.get("after")
    )
    return await task_events.event_stream(
        state,
        caller.role,
        caller.id,
        task_id,
        lambda: task_events.find_task(state, caller, task_id, after),
    )
