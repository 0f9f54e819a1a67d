"""Wires mail.telemetry into the server: tracing from OTEL_*, /metrics, budgets' defaults.

``GET /metrics`` answers admins (Prometheus text format); ``[server.telemetry] metrics_port``
also serves it without a key on its own port (bound to ``metrics_host``, loopback by default).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Response
from starlette.routing import Mount

from mail.server.auth import Caller, caller_admin
from mail.server.handlers import store_health
from mail.telemetry import metrics, tracing
from mail.telemetry.budget import set_default_budget
from mail.telemetry.settings import IpNetwork, parse_sources

logger = logging.getLogger("mail.server")

router = APIRouter()


@router.get("/metrics")
async def get_metrics(_caller: Caller = Depends(caller_admin)) -> Response:
    if not metrics.enabled():
        return Response("metrics are off ([server.telemetry] metrics = false)\n", 404)
    body, content_type = metrics.render()
    return Response(body, media_type=content_type)


def server_numbers(app: FastAPI) -> dict[str, Any]:
    """What the scrape-time gauges show: tasks by state, mailbox depth, open streams, and
    each store's write health."""
    state = getattr(app.state, "mail", None)
    if state is None:
        return {}
    tasks: dict[str, int] = {}
    depth = 0
    for inst in state.instances.all():
        runtime = inst.swarm.runtime
        depth += len(runtime.mailbox)
        for task_id, task in runtime.mail_tasks.items():
            if task_id != "*":
                tasks[task.state.value] = tasks.get(task.state.value, 0) + 1
    streams = len(getattr(state.open_streams, "_streams", ()))
    storage = [(h.store, h.degraded, h.pending_writes, h.reason) for h in store_health(state)]
    hooks = getattr(state, "webhooks", None)
    pending = hooks.engine.pending if hooks is not None else 0
    bridge = getattr(app.state, "a2a_bridge", None)
    return {
        "tasks": tasks,
        "mailbox_depth": depth,
        "open_streams": streams,
        "storage": storage,
        "webhook_pending": pending,
        "a2a_in_memory": bridge.handler.tasks_in_memory() if bridge is not None else 0,
    }


def install(app: FastAPI, config: Any) -> None:
    settings = config.telemetry
    set_default_budget(settings.max_tokens_total, settings.max_cost)
    if settings.capture_content:
        tracing.set_capture_content(True)
    tracing.setup_from_env(config.swarm.name)
    if settings.metrics:
        registry = metrics.enable()
        metrics.set_state_reader(lambda: server_numbers(app))
        if settings.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(settings.metrics_port, settings.metrics_host, registry=registry)
            logger.info(
                "metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port
            )
    app.include_router(router)
    networks = parse_sources(settings.trusted_trace_sources)
    app.add_middleware(TelemetryMiddleware, trust=TraceTrust(networks, interswarm_peer))


_PEER_ROUTES = ("/interswarm/forward", "/interswarm/back")


async def interswarm_peer(scope: dict[str, Any]) -> bool:
    """Whether a request comes from an interswarm peer: an agent key on the routes peers
    call. Such a caller is already trusted to start and continue tasks here, so its
    `traceparent` may continue its trace (a two-swarm task is one trace)."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    if path not in _PEER_ROUTES:
        return False
    app = scope.get("app")
    state = getattr(getattr(app, "state", None), "mail", None)
    if state is None:
        return False
    header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
    scheme, _, key = header.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return False
    try:
        caller = await state.auth.authenticate(key.strip())
    except Exception:  # noqa: BLE001 - a refused key is simply not a trusted peer
        return False
    return bool(caller.role == "agent")


# ASGI middleware: HTTP latency per route (metrics) and the server span of each request.
Scope = dict[str, Any]
_TRACE_HEADERS = frozenset((b"traceparent", b"tracestate"))


class TraceTrust:
    """Whose ``traceparent`` a request may continue: a client address in `networks`, or a
    request `caller` (an async check the server supplies) vouches for."""

    def __init__(
        self,
        networks: Iterable[IpNetwork] = (),
        caller: Callable[[Scope], Awaitable[bool]] | None = None,
    ) -> None:
        self.networks = tuple(networks)
        self.caller = caller

    async def trusted(self, scope: Scope) -> bool:
        client = scope.get("client")
        if client and self.networks:
            try:
                address = ipaddress.ip_address(client[0])
            except ValueError:
                address = None
            if address is not None and any(address in net for net in self.networks):
                return True
        return self.caller is not None and await self.caller(scope)


TRUST_NOBODY = TraceTrust()


_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)


def route_of(scope: Scope, root_path: str = "") -> str:
    """The route template that served the request (bounded label values), whole: a route of
    a mounted app is relative to its mount, whose path is then in the scope's ``root_path``
    after the app's own (``root_path``, the scope's before routing), so ``/a2a/tasks``, not
    ``/tasks`` (which is another route)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    mounted = str(scope.get("root_path", ""))
    mount = mounted[len(root_path) :] if mounted.startswith(root_path) else ""
    if isinstance(path, str):
        return (mount or path) + "/{path}" if isinstance(route, Mount) else mount + path
    if mount:  # under a mount, nothing matched there: one label for any such path
        return mount + "/{path}"
    endpoint = scope.get("endpoint")
    if endpoint is not None and not scope.get("path_params"):
        # A plain Starlette route: its path is the template (after a proxy's prefix).
        path = str(scope.get("path", ""))
        return path[len(root_path) :] if root_path and path.startswith(root_path) else path
    name = getattr(endpoint, "__name__", None)
    return name if isinstance(name, str) else "unmatched"


class TelemetryMiddleware:
    def __init__(self, app: Any, trust: TraceTrust = TRUST_NOBODY) -> None:
        self.app = app
        self.trust = trust

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        tracer = tracing.tracer()
        if scope["type"] != "http" or (tracer is None and not metrics.enabled()):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = scope.get("method", "GET")
        if method not in _METHODS:  # (h11 takes any token: one label for the rest)
            method = "_OTHER"
        root_path = str(scope.get("root_path", ""))  # the app's; a mount adds its path to it
        span: Any = None
        token: Any = None
        if tracer is not None:
            headers = {
                k.decode("latin-1"): v.decode("latin-1")
                for k, v in scope["headers"]
                if k in _TRACE_HEADERS
            }
            parent = link = None
            if headers:
                remote = tracing.extract(headers)
                if remote is not None:
                    if await self.trust.trusted(scope):
                        parent = remote
                    else:
                        link = remote
            span = tracing.start_span(
                f"{method} {scope.get('path', '')}",
                parent=parent,
                link=link,
                kind="SERVER",
                attributes={"http.request.method": method, "url.path": scope.get("path", "")},
            )
            token = tracing.attach(span)
        status = 500

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                metrics.http_request(
                    method, route_of(scope, root_path), status, time.perf_counter() - started
                )
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if span is not None:
                if span.is_recording():
                    route = route_of(scope, root_path)
                    span.update_name(f"{method} {route}")
                    span.set_attributes({"http.route": route, "http.response.status_code": status})
                tracing.detach(token)
                tracing.end_span(span, f"HTTP {status}" if status >= 500 else None)
