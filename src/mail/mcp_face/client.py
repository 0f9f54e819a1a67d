"""A small client for the MCP face: a session with a bearer key, tools answered as JSON."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.client.session import ClientSession, MessageHandlerFnT
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE, streamable_http_client


class ToolFailed(Exception):
    """The tool answered with an error; the text is the server's."""


@contextlib.asynccontextmanager
async def connect(
    base_url: str,
    key: str,
    timeout: float = 120.0,
    *,
    message_handler: MessageHandlerFnT | None = None,
    http_client: httpx2.AsyncClient | None = None,
    max_event_bytes: int | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with `mail server` at `base_url` (``/mcp`` is appended)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with contextlib.AsyncExitStack() as stack:
        if http_client is None:
            http_client = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout))
            )
        url = f"{base_url.rstrip('/')}/mcp"
        transport = streamable_http_client(
            url,
            http_client=http_client,
            max_sse_event_size=max_event_bytes or DEFAULT_MAX_SSE_EVENT_SIZE,
        )
        read, write = await stack.enter_async_context(transport)
        session = await stack.enter_async_context(
            ClientSession(read, write, message_handler=message_handler)
        )
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
