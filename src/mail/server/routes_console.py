"""Read-mostly routes the console needs beyond the original API (all behind a key)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request

from mail.server import task_listing
from mail.server.auth import Caller, caller_admin, caller_admin_or_user
from mail.server.handlers import get_state
from mail.server.idempotency import current_ticket, idempotent
from mail.server.jsonio import JSONBody
from mail.server.state import ServerState
from mail.server.swarm_description import describe_swarm
from mail.server.task_reads import live_summaries, task_record
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")

router = APIRouter()


@router.get("/swarm")
async def describe_callers_swarm(
    request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    state = get_state(request)
    # An instance keeps the definition it was created with (POST /swarms/load only affects
    # new ones), so describe the caller's own instance when there is one.
    inst = state.instances.peek(caller.role, caller.id)
    swarm = inst.swarm if inst is not None else state.template
    if swarm is None:
        raise HTTPException(503, "no swarm loaded")
    public = state.swarm_info()  # the name GET / and /health give (the loaded swarm's)
    info = describe_swarm(swarm, name=public["name"], description=public["description"])
    return JSONBody(info)


def _registry(request: Request) -> Any:
    registry = get_state(request).get_registry()
    if registry is None:
        raise HTTPException(503, "swarm registry not available")
    return registry


@router.get("/swarms/registry")
async def list_registry(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    from mail.net.registry_store import clean_endpoint

    registry = _registry(request)
    entries = []
    for name, endpoint in registry.get_all_endpoints().items():
        entry: dict[str, Any] = dict(clean_endpoint(endpoint))
        entry["public"] = bool(endpoint.get("public"))
        entry["volatile"] = bool(endpoint.get("volatile"))
        entry["is_local"] = name == registry.local_swarm_name
        entries.append(entry)
    return JSONBody({"swarms": entries})


@router.delete("/swarms/{swarm_name}")
@idempotent()  # a retried removal gets its first answer, not a 404
async def remove_swarm(
    swarm_name: str, request: Request, caller: Caller = Depends(caller_admin)
) -> JSONBody:
    registry = _registry(request)
    if swarm_name == registry.local_swarm_name:
        raise HTTPException(400, f"swarm '{echo(swarm_name)}' is this server's own swarm")
    ticket = current_ticket(request)
    # A retry after its first attempt's server died (a takeover): that attempt may have
    # removed it; the swarm is gone, as asked, and the answer is the one it would have had.
    if not registry.unregister_swarm(swarm_name) and not (ticket and ticket.takeover):
        raise HTTPException(404, f"swarm '{echo(swarm_name)}' not found")
    logger.info("admin %s removed swarm '%s'", caller.id, swarm_name)
    return JSONBody({"status": "removed", "swarm_name": swarm_name})


@router.get("/tasks/all")
async def list_all_tasks(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    query = request.query_params
    limit = task_listing.parse_limit(query.get("limit"))
    task_id = query.get("task_id") or None
    tasks, following = await all_tasks_page(get_state(request), limit, query.get("cursor"), task_id)
    return JSONBody(
        {"tasks": tasks}, headers=task_listing.page_headers("/tasks/all", limit, following)
    )


async def all_tasks_page(
    state: ServerState, limit: int, cursor: str | None, task_id: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    after = task_listing.decode_cursor(cursor)
    if task_id is not None:
        return await _one_task(state, task_id), None
    records: list[dict[str, Any]] = []
    for inst in state.instances.all():
        live = live_summaries(inst)
        # its finished tasks, read back from the store
        stored = await state.finished.stored_summaries(
            inst.kind, inst.id, live=live, limit=limit, before=after
        )
        records.extend({**row, "instance": inst.owner} for row in stored.values())
        records.extend({**row, "instance": inst.owner} for row in live.values())
    return task_listing.page_list(records, limit, after)


async def _one_task(state: ServerState, task_id: str) -> list[dict[str, Any]]:
    """The full record of one task of any live instance (live or stored), or nothing."""
    if task_id == "*":
        return []
    for inst in state.instances.all():
        task = inst.swarm.get_task_by_id(task_id)
        if task is not None:
            return [{**task_record(task, inst.swarm.runtime), "instance": inst.owner}]
    finished = state.finished
    for key in await finished.owners(task_id):
        owner = state.instances.peek(key.caller_role, key.caller_id)
        if owner is None:
            continue
        stored = await finished.stored_task(key.caller_role, key.caller_id, task_id)
        if stored is not None:
            return [{**task_record(stored, owner.swarm.runtime), "instance": owner.owner}]
    return []
