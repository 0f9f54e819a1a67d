"""An MCP client session (the `mcp` SDK over Streamable HTTP) against a real `mail server`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.types import ResourceUpdatedNotification

from mail.mcp_face.client import ToolFailed, call_json, connect

__all__ = ["ACCEPT", "INITIALIZE", "Agent", "ToolFailed", "mcp_agent"]

# A bare client's first request (no SDK): what POST /mcp takes to open a session.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bare", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"  # the Accept header POST /mcp asks for


class Agent:
    """One MCP session; `call` returns the tool's text (parsed as JSON when it is)."""

    def __init__(self, session: ClientSession, notices: asyncio.Queue[str]) -> None:
        self.session = session
        # URIs of the notifications/resources/updated the server pushed, in order.
        self.notices = notices
        # Set once the session's standalone GET stream (where pushes arrive) is open.
        self.push_stream_open = asyncio.Event()

    async def call(self, tool: str, **args: Any) -> Any:
        return await call_json(self.session, tool, **args)

    async def raw(self, tool: str, **args: Any) -> Any:
        """The CallToolResult as received."""
        return await self.session.call_tool(tool, args)

    async def resource(self, uri: str) -> Any:
        result = await self.session.read_resource(uri)
        return json.loads(result.contents[0].text)  # type: ignore[union-attr]


@contextlib.asynccontextmanager
async def mcp_agent(
    base_url: str, key: str, *, max_event_bytes: int | None = None
) -> AsyncIterator[Agent]:
    notices: asyncio.Queue[str] = asyncio.Queue()
    opened = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            notices.put_nowait(str(message.params.uri))

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "GET" and response.status_code == 200:
            opened.set()

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"},
        timeout=httpx2.Timeout(120.0),
        event_hooks={"response": [on_response]},
    )
    async with (
        http,
        connect(
            base_url,
            key,
            message_handler=on_message,
            http_client=http,
            max_event_bytes=max_event_bytes,
        ) as session,
    ):
        agent = Agent(session, notices)
        agent.push_stream_open = opened
        yield agent
