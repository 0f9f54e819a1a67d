"""Routes for admin and user callers: identity, status, messaging, task records and events."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.routing import Route

from mail.server import messaging, task_events, task_listing, task_reads
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.bodies import parse_task_id, read_json_object
from mail.server.handlers import get_state, storage_summary
from mail.server.idempotency import idempotent
from mail.server.jsonio import JSONBody
from mail.server.message_replay import resolve_message
from mail.server.sse import EventStreamResponse

router = APIRouter()


# The hot path is a plain Starlette route, the first the app matches: it takes nothing FastAPI
# would inject (the caller is resolved in the handler), so FastAPI's per-request dependency
# solving and response handling (~7% of a stub request's CPU, bench/http.py) is skipped.
# Errors still go through the app's exception handlers. The key is taken with the task it
# starts; the outcome (the task's answer, which the task store keeps before it is sent) is
# recorded right after the answer.
guarded = idempotent(resolve_message, deferred=True, lazy_outcome=True, prefer_async=True)
message_route = Route("/message", guarded(messaging.handle), methods=["POST"])


@router.get("/whoami")
async def whoami(caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    # `username` is the spelling of the OpenAPI file; `id` the one of the docs.
    return JSONBody({"id": caller.id, "role": caller.role, "username": caller.id})


@router.get("/status")
async def status(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    state = get_state(request)
    inst = state.instances.peek(caller.role, caller.id)
    storage = storage_summary(state)
    # "degraded" while writes are failing: tasks still run, but what they write is only
    # in memory until the database takes it (storage.reason says why).
    ready = "ready" if storage["status"] == "ok" else "degraded"
    return JSONBody(
        {
            "swarm": {"name": state.public_swarm_name(), "status": ready},
            "active_users": state.instances.count("user"),
            "user_mail_ready": inst is not None,
            "user_task_running": inst is not None and inst.is_running(),
            "storage": storage,
        }
    )


@router.get("/tasks")
async def list_tasks(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    limit = task_listing.parse_limit(request.query_params.get("limit"))
    cursor = request.query_params.get("cursor")
    records, following = await task_reads.list_tasks(get_state(request), caller, limit, cursor)
    return JSONBody(records, headers=task_listing.page_headers("/tasks", limit, following))


@router.get("/task")
async def get_task(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    # The original takes a JSON body on GET; ?task_id= is accepted too.
    data = await read_json_object(request, required=False)
    task_id = parse_task_id(data, request.query_params.get("task_id"))
    return JSONBody(await task_reads.get_task(get_state(request), caller, task_id))


# Matched after ``/task/events``: ``GET /task`` with the id in the path (a background
# message's ``Location``).
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
