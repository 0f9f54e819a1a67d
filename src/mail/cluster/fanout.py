"""Operator views that span every instance of a deployment (``GET /tasks/all``, admin lookups)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from mail.cluster.host import ForwardedRequest, UnaryResponse, caller_to_dict
from mail.server import task_listing
from mail.server.auth import Caller, caller_admin, caller_admin_or_user
from mail.server.handlers import get_state
from mail.server.jsonio import JSONBody

logger = logging.getLogger("mail.cluster")

# Seconds one instance may take to answer before the view is given without it.
FAN_OUT_TIMEOUT = 10.0


async def ask_every_instance(
    instances: Any, caller: Caller, request: ForwardedRequest
) -> list[UnaryResponse]:
    """The answers of every live instance actor of ``instances``' namespace to ``request``."""
    names = await asyncio.to_thread(instances.list_instances)

    async def one(name: str) -> UnaryResponse | None:
        try:
            handle = await instances.lookup(name)
            reply: UnaryResponse = await asyncio.wait_for(
                handle.unary.remote(caller_to_dict(caller), request), FAN_OUT_TIMEOUT
            )
        except Exception as exc:  # ending, restarting or slow: leave it out of the view
            logger.info("instance %s left out of %s: %s", name, request.path, type(exc).__name__)
            return None
        return reply

    answers = await asyncio.gather(*(one(name) for name in names))
    return [answer for answer in answers if answer is not None]


def merged_task_records(answers: list[UnaryResponse]) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    for answer in answers:
        if answer.status != 200:
            continue
        tasks.extend(json.loads(answer.body).get("tasks", []))
    return tasks


router = APIRouter()


@router.get("/tasks/all", include_in_schema=False)
async def list_all_tasks(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    # Each instance answers its own first page after the cursor; the merged first `limit`
    # of those are the deployment's page (an instance's later tasks sort after its own page).
    query = request.query_params
    limit = task_listing.parse_limit(query.get("limit"))
    after = task_listing.decode_cursor(query.get("cursor"))
    backend = request.app.state.cluster_backend
    client = request.scope.get("client")
    forwarded = ForwardedRequest(
        method="GET",
        path="/tasks/all",
        query=request.scope.get("query_string", b""),
        headers=list(request.scope["headers"]),
        client=tuple(client) if client else None,  # type: ignore[arg-type]
    )
    answers = await ask_every_instance(backend.instances, caller, forwarded)
    merged = merged_task_records(answers)
    if query.get("task_id"):
        return JSONBody({"tasks": merged[:1]})
    tasks, following = task_listing.page_list(merged, limit, after)
    return JSONBody(
        {"tasks": tasks}, headers=task_listing.page_headers("/tasks/all", limit, following)
    )


# -- an admin's view of one task held by another instance ---------------------------------------

# Instance kinds whose tasks an admin reaches through each route in one process.
_TASK_OWNER_KINDS = {"/task": ("swarm",), "/task/events": None}


def admin_fallback(caller: Caller, path: str, status: int) -> bool:
    """Whether the admin's own instance's 404 may be answered by another instance."""
    return caller.role == "admin" and status == 404 and path in _TASK_OWNER_KINDS


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


def _requested_task_id(request: ForwardedRequest) -> str | None:
    query = parse_qs(request.query.decode("latin-1"))
    task_id = _first(query, "task_id")
    if task_id is None and request.path == "/task" and request.body.strip():
        with contextlib.suppress(ValueError):
            data = json.loads(request.body)
            if isinstance(data, dict) and isinstance(data.get("task_id"), str):
                task_id = data["task_id"]
    return task_id


async def task_holder(instances: Any, swarm: str, request: ForwardedRequest) -> Any | None:
    """The handle of the instance actor that has the requested task, if one has it."""
    task_id = _requested_task_id(request)
    if not task_id:
        return None
    kinds = _TASK_OWNER_KINDS[request.path]
    names = await asyncio.to_thread(instances.list_instances)
    if kinds is not None:
        names = [n for n in names if any(n.startswith(f"{swarm}/{kind}/") for kind in kinds)]

    async def has(name: str) -> Any | None:
        try:
            handle = await instances.lookup(name)
            found = await asyncio.wait_for(handle.has_task.remote(task_id), FAN_OUT_TIMEOUT)
        except Exception as exc:  # ending, restarting or slow: not asked
            logger.info("instance %s not asked for task %s: %s", name, task_id, type(exc).__name__)
            return None
        return handle if found else None

    for handle in await asyncio.gather(*(has(name) for name in names)):
        if handle is not None:
            return handle
    return None


async def holder_stream(
    instances: Any, handle: Any, request: ForwardedRequest
) -> AsyncIterator[dict[str, Any]]:
    """The response messages of ``request`` answered by the instance ``handle`` holds."""
    refs = handle.owned_stream.remote(request)
    finished = False
    try:
        async for ref in refs:
            yield await ref
        finished = True
    finally:
        if not finished:  # the client went away: stop the host's request too
            with contextlib.suppress(Exception):
                instances.ray.cancel(refs)


# -- an admin's GET /tasks: the admin's own tasks and those remote swarms run here -------------


async def admin_task_list(
    instances: Any, swarm: str, caller: Caller, request: ForwardedRequest
) -> Response | None:
    """The admin's page of ``GET /tasks`` with the remote swarms' tasks merged in, as in one
    process; None when no remote swarm has an instance here (the plain forward answers)."""
    query = parse_qs(request.query.decode("latin-1"))
    limit = task_listing.parse_limit(_first(query, "limit"))
    after = task_listing.decode_cursor(_first(query, "cursor"))
    names = await asyncio.to_thread(instances.list_instances)
    remote = [n for n in names if n.startswith(f"{swarm}/swarm/")]
    if not remote:
        return None
    owned = ForwardedRequest(method="GET", path="/tasks", headers=request.headers)

    async def summaries(name: str) -> dict[str, Any]:
        try:
            handle = await instances.lookup(name)
            reply = await asyncio.wait_for(handle.owned_unary.remote(owned), FAN_OUT_TIMEOUT)
        except Exception as exc:  # ending, restarting or slow: leave it out of the view
            logger.info("instance %s left out of /tasks: %s", name, type(exc).__name__)
            return {}
        return dict(json.loads(reply.body)) if reply.status == 200 else {}

    try:
        own = await instances.actor(swarm, caller)
        mine: UnaryResponse = await own.owned_unary.remote(owned)
    except Exception as exc:  # reclaimed or restarting: the plain forward resends it
        logger.info("admin task list left to the plain forward: %s", type(exc).__name__)
        instances.forget(swarm, caller)
        return None
    records: dict[str, Any] = {}
    for part in await asyncio.gather(*(summaries(name) for name in remote)):
        records.update(part)
    records.update(json.loads(mine.body) if mine.status == 200 else {})
    chosen, following = task_listing.page(list(records.values()), limit, after)
    response = JSONBody(chosen)
    if following is not None:
        response.headers["X-Next-Cursor"] = following
        response.headers["Link"] = f'</tasks?limit={limit}&cursor={following}>; rel="next"'
    return response


# -- GET /status: the caller's instance and the live user instances, cluster-wide ---------------


@router.get("/status", include_in_schema=False)
async def status(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    """As in one process, answered from the actors' names: no instance is made by asking."""
    from mail.cluster.actor import actor_name

    state = get_state(request)
    instances = request.app.state.cluster_backend.instances
    names = await asyncio.to_thread(instances.list_instances)
    mine = actor_name(state.swarm_name, caller)
    running = False
    if mine in names:
        try:
            handle = await instances.lookup(mine)
            running = bool(await asyncio.wait_for(handle.loop_running.remote(), FAN_OUT_TIMEOUT))
        except Exception as exc:  # ending or restarting: not running now
            logger.info("instance %s left out of /status: %s", mine, type(exc).__name__)
    return JSONBody(
        {
            "swarm": {"name": state.swarm_name, "status": "ready"},
            "active_users": sum(1 for n in names if n.startswith(f"{state.swarm_name}/user/")),
            "user_mail_ready": mine in names,
            "user_task_running": running,
        }
    )
