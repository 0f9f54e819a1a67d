"""Front doors other than the REST routes: protocols that reach the same instances."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from mail.config import ServerConfig

# name -> "module:function"; ``function(app, config)`` adds the door's routes to ``app``.
FRONT_DOORS: dict[str, str] = {
    "a2a": "mail.a2a.routes:install",
    "mcp": "mail.mcp_face:install",
}

# Doors that serve in-process instances only (they hold live objects of the instance), and
# their paths: in cluster mode those answer 501 saying so, rather than a bare 404.
LOCAL_ONLY_PATHS: dict[str, tuple[str, ...]] = {
    "a2a": ("/a2a", "/a2a/{path:path}", "/.well-known/agent-card.json", "/task/cancel"),
    "mcp": ("/mcp",),
}
LOCAL_ONLY = frozenset(LOCAL_ONLY_PATHS)


def install_front_doors(app: FastAPI, config: ServerConfig, *, clustered: bool) -> None:
    """Install every front door on ``app`` (those in :data:`LOCAL_ONLY` only without a cluster)."""
    for name, target in FRONT_DOORS.items():
        if clustered and name in LOCAL_ONLY:
            _install_unavailable(app, name)
            continue
        module_name, _, function_name = target.partition(":")
        install = getattr(importlib.import_module(module_name), function_name)
        install(app, config)


def _install_unavailable(app: FastAPI, name: str) -> None:
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    detail = (
        f"the {name} front door is not served in cluster mode ([server.cluster]): "
        "instances live in other processes (see docs/cluster.md, Limits)"
    )

    async def unavailable(request: Request) -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=501)

    for path in LOCAL_ONLY_PATHS[name]:
        app.add_route(path, unavailable, methods=["GET", "POST", "DELETE"])
