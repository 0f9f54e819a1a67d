"""An MCP client session (the `mcp` SDK over Streamable HTTP) against a real `mail server`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from mcp.client.session import ClientSession

from mail.mcp_face.client import ToolFailed, call_json, connect

__all__ = ["Agent", "ToolFailed", "mcp_agent"]


class Agent:
    """One MCP session; `call` returns the tool's text (parsed as JSON when it is)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, **args: Any) -> Any:
        return await call_json(self.session, tool, **args)

    async def resource(self, uri: str) -> Any:
        result = await self.session.read_resource(uri)
        return json.loads(result.contents[0].text)  # type: ignore[union-attr]


@contextlib.asynccontextmanager
async def mcp_agent(base_url: str, key: str) -> AsyncIterator[Agent]:
    async with connect(base_url, key) as session:
        yield Agent(session)
