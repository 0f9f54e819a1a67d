"""The MCP face of ``mail server``: outside agents join a swarm instance over MCP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Receive, Scope, Send

__all__ = ["install"]


class LazyMcpRoute:
    """The ASGI app of ``/mcp``: builds the MCP server on first use, stops it with the app."""

    def __init__(self, app: Any, config: Any) -> None:
        self.app = app
        self.config = config
        self.endpoint: Any = None
        self._building = asyncio.Lock()
        self._stop = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.endpoint or await self._build()
        await endpoint(scope, receive, send)

    async def _build(self) -> Any:
        async with self._building:
            if self.endpoint is None:
                from mail.mcp_face import agent_tools, inbox_tools, user_tools
                from mail.mcp_face.face import Face
                from mail.mcp_face.transport import McpEndpoint

                face = Face(self.app, self.config.mcp)
                agent_tools.register(face)
                inbox_tools.register(face)
                user_tools.register(face)
                max_body = self.config.settings.max_request_body or 4 * 1024 * 1024
                endpoint = McpEndpoint(face, max_body)
                started = asyncio.Event()
                self._runner = asyncio.create_task(self._serve(endpoint, started))
                await started.wait()
                self.endpoint = endpoint
        return self.endpoint

    async def _serve(self, endpoint: Any, started: asyncio.Event) -> None:
        async with endpoint.running():
            started.set()
            await self._stop.wait()

    async def close(self) -> None:
        self._stop.set()
        if self._runner is not None:
            await self._runner


def install(app: Any, config: Any) -> None:
    """Serve MCP at ``/mcp`` on `app` (unless ``[server.mcp] enabled = false``)."""
    if not config.mcp.enabled:
        return
    from starlette.routing import Route

    route = LazyMcpRoute(app, config)
    app.router.routes.append(Route("/mcp", route, methods=["GET", "POST", "DELETE"]))
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[Any]:
        async with inner(app_) as value:
            try:
                yield value
            finally:
                await route.close()

    app.router.lifespan_context = lifespan
