"""MCP client actions (http(s) servers by default; ``[stdlib.mcp]`` in mail.toml)."""

from mail.stdlib.mcp.actions import (
    mcp_call_tool,
    mcp_get_prompt,
    mcp_list_prompts,
    mcp_list_resources,
    mcp_list_tools,
    mcp_ping,
    mcp_read_resource,
)

__all__ = [
    "mcp_call_tool",
    "mcp_get_prompt",
    "mcp_list_prompts",
    "mcp_list_resources",
    "mcp_list_tools",
    "mcp_ping",
    "mcp_read_resource",
]
