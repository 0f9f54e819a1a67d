"""The front end's routes in cluster mode: authenticate here, run in the caller's instance host."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from starlette.responses import Response, StreamingResponse

from mail.cluster.host import caller_to_dict
from mail.server import task_listing
from mail.server.auth import Caller, authenticate_request, caller_admin, caller_admin_or_user
from mail.server.backends import ForwardedRequest, InstanceBackend, UnaryResponse
from mail.server.handlers import get_state
from mail.server.jsonio import JSONBody

logger = logging.getLogger("mail.cluster")

# (path, methods) of the routes whose work happens in the caller's instance.
INSTANCE_ROUTES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("/message", ("POST",)),
    ("/tasks", ("GET",)),
    ("/task", ("GET",)),
    ("/task/events", ("GET",)),
    ("/task/{task_id}", ("GET",)),  # GET /task with the id in the path: forwarded as that
    ("/swarm", ("GET",)),
    ("/responses", ("POST",)),
    ("/threads", ("GET",)),
    ("/threads/{thread_id}", ("GET",)),
    ("/attachments/{attachment_id}", ("GET",)),
    ("/interswarm/forward", ("POST",)),
    ("/interswarm/back", ("POST",)),
    ("/interswarm/message", ("POST",)),
)
_STREAM_PATHS = frozenset({"/task/events"})
# Roles each instance route admits (the routes' own dependencies say the same): checked here
# so a caller of the wrong role gets its 403 at once, without an instance being made for it.
_AGENT_ROUTES = frozenset({"/interswarm/forward", "/interswarm/back"})
_USER_ROLES = frozenset({"admin", "user"})
_HOP_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"connection"})
# Seconds a client should wait before retrying when an instance's node just failed.
RETRY_AFTER = "2"


def wants_stream(path: str, body: bytes) -> bool:
    if path in _STREAM_PATHS:
        return True
    if b'"stream"' not in body:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("stream") is True


async def _check_envelope(request: Request, swarm: str) -> None:
    """A malformed envelope gets its 400 here, as in one process: before any instance is made
    (an instance actor for a new caller takes seconds to start)."""
    from mail.server.bodies import read_json_object
    from mail.server.errors import BadRequest
    from mail.server.interswarm import validate_envelope

    config = getattr(request.app.state, "config", None)
    settings = config.settings if config is not None else None
    envelope = validate_envelope(await read_json_object(request), settings)
    if envelope["target_swarm"] != swarm:
        raise BadRequest(
            f"received interswarm message for wrong swarm: '{envelope['target_swarm']}'"
        )


def interswarm_recipient(path: str, body: bytes, swarm: str) -> tuple[str, str, str] | None:
    """The local instance an interswarm envelope is delivered to: ``(kind, id, contributor)``."""
    from mail.core.message import parse_task_contributor

    if path not in _AGENT_ROUTES:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    envelope = data.get("message") if isinstance(data, dict) else None
    if not isinstance(envelope, dict):
        return None
    owner = envelope.get("task_owner")
    contributors = envelope.get("task_contributors")
    if not isinstance(owner, str) or not isinstance(contributors, list):
        return None
    if path == "/interswarm/forward" and owner.rpartition("@")[2] != swarm:
        return None  # a remote swarm's task: it runs in that swarm's instance here
    for contributor in [owner, *contributors]:
        if not isinstance(contributor, str):
            continue
        try:
            role, ident, where = parse_task_contributor(contributor)
        except ValueError:
            continue
        if where != swarm:
            continue
        if role not in ("admin", "user", "swarm"):
            return None
        return role, ident, contributor
    return None


def _forwarded(request: Request, body: bytes) -> ForwardedRequest:
    client = request.scope.get("client")
    path, query = request.url.path, request.scope.get("query_string", b"")
    task_id = request.path_params.get("task_id")
    if isinstance(task_id, str):  # GET /task/{task_id} is GET /task?task_id=...
        path, query = "/task", urlencode({"task_id": task_id}).encode()
    return ForwardedRequest(
        method=request.method,
        path=path,
        query=query,
        headers=list(request.scope["headers"]),
        body=body,
        client=tuple(client) if client else None,  # type: ignore[arg-type]
    )


def _headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in raw if k.lower() not in _HOP_HEADERS]


def _unavailable(exc: BaseException) -> HTTPException:
    logger.warning("instance unavailable: %s", str(exc).splitlines()[0] if str(exc) else exc)
    return HTTPException(
        503,
        "the node running this caller's instance failed; it is being restarted elsewhere "
        "and its tasks continue: retry shortly, or follow a task with GET /task/events",
        headers={"Retry-After": RETRY_AFTER},
    )


class _Relay(Response):
    """A response made of the ASGI messages an instance host produced."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        super().__init__(content=body, status_code=status)
        self.raw_headers = [*_headers(headers), (b"content-length", str(len(body)).encode())]


async def forward(request: Request) -> Response:
    state = get_state(request)
    backend: InstanceBackend = request.app.state.cluster_backend
    route = request.scope.get("route")
    template = getattr(route, "path", request.url.path)
    if template == "/responses" and not state.config.debug:
        raise HTTPException(404, "Not found")  # as in one process: before looking at keys
    caller = await authenticate_request(request)
    allowed = frozenset({"agent"}) if template in _AGENT_ROUTES else _USER_ROLES
    if caller.role not in allowed:
        raise HTTPException(403, "invalid role")
    body = await request.body()
    fwd = _forwarded(request, body)
    swarm = state.swarm_name
    if template in _AGENT_ROUTES:
        await _check_envelope(request, swarm)
    if not wants_stream(fwd.path, body):
        try:
            if caller.role == "admin" and fwd.path == "/tasks":
                # As in one process, with the tasks remote swarms run here.
                instances = getattr(backend, "instances", None)
                listing = instances and await admin_task_list(instances, swarm, caller, fwd)
                if listing is not None:
                    return listing
            recipient = interswarm_recipient(template, body, swarm)
            if recipient is not None:
                kind, ident, contributor = recipient
                delivered = await backend.unary_at(swarm, kind, ident, caller, fwd)
                if delivered is None:  # as in one process: the instance is not here
                    raise HTTPException(
                        404, f"no mail instance found for contributor: {contributor}"
                    )
                return _Relay(delivered.status, delivered.headers, delivered.body)
            reply = await backend.unary(swarm, caller, fwd)
            if admin_fallback(caller, fwd.path, reply.status):
                holder = await _holder(backend, swarm, fwd)
                if holder is not None:
                    reply = await holder.owned_unary.remote(fwd) or reply
        except Exception as exc:
            if backend.unavailable(exc):
                raise _unavailable(exc) from None
            raise
        return _Relay(reply.status, reply.headers, reply.body)
    messages = backend.stream(swarm, caller, fwd)
    try:
        first = await anext(messages)
        if admin_fallback(caller, fwd.path, first["status"]):
            # Not in the admin's own instance: in one process an admin sees every task.
            holder = await _holder(backend, swarm, fwd)
            if holder is not None:
                await messages.aclose()  # type: ignore[attr-defined]
                messages = holder_stream(getattr(backend, "instances", None), holder, fwd)
                first = await anext(messages)
    except Exception as exc:
        if backend.unavailable(exc):
            raise _unavailable(exc) from None
        raise
    response = StreamingResponse(_bodies(messages), status_code=first["status"])
    response.raw_headers = _headers(first.get("headers", []))
    return response


async def _holder(backend: Any, swarm: str, request: ForwardedRequest) -> Any | None:
    instances = getattr(backend, "instances", None)
    return None if instances is None else await task_holder(instances, swarm, request)


async def _bodies(messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for message in messages:
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
    except Exception as exc:
        # The instance's node died mid-stream: the connection is cut (no closing event), and
        # the client resumes with GET /task/events and Last-Event-ID on any front end.
        logger.warning("stream cut: %s", str(exc).splitlines()[0] if str(exc) else exc)
        raise


def cluster_router() -> APIRouter:
    router = APIRouter()
    for path, methods in INSTANCE_ROUTES:
        router.add_api_route(path, forward, methods=list(methods), include_in_schema=False)
    return router


def install_cluster(app: FastAPI, backend: InstanceBackend) -> None:
    """Route instance work to ``backend`` (before the local routes, which it shadows)."""
    app.state.cluster_backend = backend
    routes = [*cluster_router().routes, *fanout_router.routes]
    if getattr(app.state, "cluster_shared", None) is not None:
        from mail.cluster.deployment import router as shared_router

        routes += shared_router.routes  # /, /health, /swarms/load: the deployment's state
    app.router.routes[:0] = routes


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


# Operator views that span every instance of a deployment (``GET /tasks/all``, admin lookups).
fanout_router = APIRouter()


@fanout_router.get("/tasks/all", include_in_schema=False)
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
    return JSONBody(chosen, headers=task_listing.page_headers("/tasks", limit, following))


# -- GET /status: the caller's instance and the live user instances, cluster-wide ---------------


@fanout_router.get("/status", include_in_schema=False)
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
