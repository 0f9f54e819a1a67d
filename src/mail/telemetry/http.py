"""ASGI middleware: HTTP latency per route (metrics) and the server span of each request.

A request carrying a W3C ``traceparent`` (an interswarm hop) continues that trace: its server
span is the parent of whatever the request starts, e.g. the task a peer forwards here.
With tracing and metrics off it calls straight through.
"""

from __future__ import annotations

import time
from typing import Any

from mail.telemetry import metrics, tracing

Scope = dict[str, Any]
_TRACE_HEADERS = frozenset((b"traceparent", b"tracestate"))


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
    def __init__(self, app: Any) -> None:
        self.app = app

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
            span = tracing.start_span(
                f"{method} {scope.get('path', '')}",
                parent=tracing.extract(headers) if headers else None,
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
