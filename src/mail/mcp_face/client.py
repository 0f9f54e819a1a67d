"""A small client for the MCP face: a session with a bearer key, tools answered as JSON.

    async with connect("http://localhost:8000", key) as session:
        joined = await call_json(session, "join_swarm", name="helper")

Used by scripts/mcp_demo_agent.py and the tests; any MCP client works the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


class ToolFailed(Exception):
    """The tool answered with an error; the text is the server's."""


@contextlib.asynccontextmanager
async def connect(base_url: str, key: str, timeout: float = 120.0) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with `mail server` at `base_url` (``/mcp`` is appended)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout)) as http,
        streamable_http_client(f"{base_url.rstrip('/')}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call_json(session: ClientSession, tool: str, **args: Any) -> Any:
    """The tool's text answer, parsed as JSON when it is JSON; ToolFailed on an error."""
    result = await session.call_tool(tool, args)
    text = "".join(getattr(part, "text", "") for part in result.content)
    if result.is_error:
        raise ToolFailed(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
