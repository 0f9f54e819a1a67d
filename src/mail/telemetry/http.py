"""ASGI middleware: HTTP latency per route (metrics) and the server span of each request."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from mail.telemetry import metrics, tracing
from mail.telemetry.settings import IpNetwork

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


def route_of(scope: Scope) -> str:
    """The route template that served the request (bounded label values)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    endpoint = scope.get("endpoint")
    if endpoint is not None and not scope.get("path_params"):
        return str(scope.get("path", ""))  # a plain Starlette route: its path is the template
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
                metrics.http_request(method, route_of(scope), status, time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if span is not None:
                if span.is_recording():
                    route = route_of(scope)
                    span.update_name(f"{method} {route}")
                    span.set_attributes({"http.route": route, "http.response.status_code": status})
                tracing.detach(token)
                tracing.end_span(span, f"HTTP {status}" if status >= 500 else None)
