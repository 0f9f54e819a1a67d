"""``GET /task/events``: resubscribe to a task's SSE stream (owner or admin); ``GET
/task/{task_id}``: ``GET /task`` with the id in the path (a background message's ``Location``),
matched after ``/task/events``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from mail.server import task_events, task_reads
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.bodies import parse_task_id
from mail.server.handlers import get_state
from mail.server.jsonio import JSONBody
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


@router.get("/task/{task_id}")
async def get_task_by_path(
    task_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    task_id = parse_task_id({}, task_id)
    return JSONBody(await task_reads.get_task(get_state(request), caller, task_id))
