"""Routes an instance host answers about its own instance, for an admin's cross-instance views."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from mail.server import task_events
from mail.server.bodies import parse_task_id, read_json_object
from mail.server.handlers import get_state
from mail.server.jsonio import JSONBody
from mail.server.sse import EventStreamResponse
from mail.server.task_reads import caller_summaries, task_record

OWNED_PREFIX = "/_cluster/owned"

router = APIRouter()


def _owner(request: Request) -> tuple[str, str]:
    role, caller_id = request.app.state.cluster_owner
    return str(role), str(caller_id)


async def has_task(state: Any, role: str, caller_id: str, task_id: str) -> bool:
    """Whether the (role, id) instance has the task, live, archived or stored (creates
    nothing)."""
    inst = state.instances.peek(role, caller_id)
    if inst is not None and inst.swarm.get_task_by_id(task_id) is not None:
        return True
    if task_id in state.instances.archived_tasks(role, caller_id):
        return True
    return await _stored(state, role, caller_id, task_id) is not None


async def _stored(state: Any, role: str, caller_id: str, task_id: str) -> Any | None:
    """A finished task of the instance that left memory, read back from the store."""
    finished = getattr(state, "finished", None)
    return None if finished is None else await finished.stored_task(role, caller_id, task_id)


@router.get(OWNED_PREFIX + "/task", include_in_schema=False)
async def owned_task(request: Request) -> JSONBody:
    state = get_state(request)
    role, caller_id = _owner(request)
    data = await read_json_object(request, required=False)
    task_id = parse_task_id(data, request.query_params.get("task_id"))
    inst = state.instances.peek(role, caller_id)
    task = None if inst is None else inst.swarm.get_task_by_id(task_id)
    if inst is not None and task is not None:
        return JSONBody(task_record(task, inst.swarm.runtime))
    archived = state.instances.archived_tasks(role, caller_id).get(task_id)
    if archived is not None:
        return JSONBody(archived)
    stored = await _stored(state, role, caller_id, task_id)
    if inst is None or stored is None:
        raise HTTPException(404, f"task '{task_id}' not found")
    return JSONBody(task_record(stored, inst.swarm.runtime))


@router.get(OWNED_PREFIX + "/task/events", include_in_schema=False)
async def owned_task_events(request: Request) -> EventStreamResponse:
    state = get_state(request)
    role, caller_id = _owner(request)
    task_id = parse_task_id({}, request.query_params.get("task_id"))
    after = task_events.parse_after(
        request.headers.get("last-event-id"), request.query_params.get("after")
    )
    return await task_events.event_stream(
        state,
        role,
        caller_id,
        task_id,
        lambda: task_events.find_owned_task(state, role, caller_id, task_id, after),
    )


@router.get(OWNED_PREFIX + "/tasks", include_in_schema=False)
async def owned_tasks(request: Request) -> JSONBody:
    """Every task summary of this host's instance, unpaged (the front end merges and pages)."""
    state = get_state(request)
    role, caller_id = _owner(request)
    inst = state.instances.peek(role, caller_id)
    records = await caller_summaries(state, role, caller_id, inst)
    return JSONBody(records)
