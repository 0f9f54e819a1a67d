"""The `route` and `method` labels of `mail_http_request_duration_seconds` stay bounded: a
route's template (without a proxy's prefix), one label for what a mount does not serve, one
for methods outside HTTP's."""

from __future__ import annotations

import uuid

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from mail.server.observability import TelemetryMiddleware
from mail.telemetry import metrics


async def _ok(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _app(kind: str) -> TelemetryMiddleware:
    """The server's shapes: a route of its own and an app mounted at /a2a, on Starlette's
    router or FastAPI's (which leaves no route in the scope for a plain Starlette route)."""
    inner = Starlette(routes=[Route("/tasks", _ok), Route("/tasks/{id}", _ok)])
    routes = [Route("/message", _ok, methods=["POST"]), Mount("/a2a", inner)]
    if kind == "starlette":
        return TelemetryMiddleware(Starlette(routes=routes))
    app = FastAPI()
    app.router.routes.extend(routes)
    return TelemetryMiddleware(app)


def _count(method: str, route: str) -> float:
    text = metrics.render()[0].decode()
    name = "mail_http_request_duration_seconds_count"
    for line in text.splitlines():
        if line.startswith(name) and f'method="{method}"' in line and f'route="{route}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("kind", ["starlette", "fastapi"])
@pytest.mark.parametrize("root_path", ["", "/proxy"])
async def test_labels_are_templates_whatever_the_path(kind: str, root_path: str) -> None:
    was_on = metrics.enabled()
    metrics.enable()
    try:
        labels = [("POST", "/message"), ("GET", "/a2a/tasks/{id}"), ("GET", "/a2a/{path}")]
        labels += [("GET", "unmatched"), ("_OTHER", "/message")]
        before = {label: _count(*label) for label in labels}
        transport = httpx.ASGITransport(app=_app(kind), root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for _ in range(2):
                await client.post(f"{root_path}/message")
                await client.get(f"{root_path}/a2a/tasks/{uuid.uuid4()}")
                await client.get(f"{root_path}/a2a/{uuid.uuid4()}")  # nothing serves it
                await client.get(f"{root_path}/{uuid.uuid4()}")
                await client.request(f"X{uuid.uuid4().hex[:8].upper()}", f"{root_path}/message")
        assert {label: _count(*label) - before[label] for label in labels} == {
            label: 2.0 for label in labels
        }
    finally:
        if not was_on:
            metrics.disable()
