"""MCP client actions: ping, tools, prompts and resources of a remote MCP server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from mail.api.actions import MAILAction
from mail.stdlib._common import bad_args, error, exception_text, settings, stdlib_action
from mail.stdlib.mcp.connect import AddressRefused, ByteBudget, ServerRefused, open_transport
from mail.stdlib.netpolicy import exception_chain

_SERVER_URL = {"type": "string", "description": "URL of the MCP server (http:// or https://)."}

PING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"server_url": _SERVER_URL},
    "required": ["server_url"],
}
CALL_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server_url": _SERVER_URL,
        "tool_name": {"type": "string", "description": "Name of the tool to call."},
        "tool_input": {"type": "object", "description": "Arguments of the tool."},
    },
    "required": ["server_url", "tool_name", "tool_input"],
}
GET_PROMPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server_url": _SERVER_URL,
        "prompt_name": {"type": "string", "description": "Name of the prompt."},
        "arguments": {
            "type": "object",
            "description": "Optional string arguments of the prompt.",
            "optional": True,
        },
    },
    "required": ["server_url", "prompt_name"],
}
READ_RESOURCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server_url": _SERVER_URL,
        "resource_uri": {"type": "string", "description": "URI of the resource to read."},
    },
    "required": ["server_url", "resource_uri"],
}

# Pages followed by the list actions before giving up on a server that never stops paging.
MAX_PAGES = 50


@dataclass
class CallToolResult:
    """The shape the original reported for a tool call (its MCP library's result type)."""

    content: list[Any]
    structured_content: dict[str, Any] | None
    data: Any
    is_error: bool = False


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


# The JSON-RPC error code the SDK gives a request it stopped waiting for.
_REQUEST_TIMEOUT = -32001


def _is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` or anything in its chain is one of the call's timers running out.

    Three timers share ``[stdlib.mcp] timeout``: the call's deadline, the SDK's read timeout
    and the HTTP client's; under load any of them can fire first, and all mean the same.
    """
    import httpcore2
    import httpx2

    return any(
        isinstance(seen, TimeoutError | httpx2.TimeoutException | httpcore2.TimeoutException)
        or getattr(getattr(seen, "error", None), "code", None) == _REQUEST_TIMEOUT
        for seen in exception_chain(exc)
    )


def _cause_text(exc: BaseException) -> str:
    """Prefer a guard refusal anywhere in the chain (the SDK may wrap it)."""
    for seen in exception_chain(exc):
        if isinstance(seen, AddressRefused | ServerRefused):
            return error(str(seen))
    return exception_text(exc)


async def _run(server_url: str, request: Callable[[Any], Awaitable[Any]]) -> str:
    """Open a session, run ``request(client)`` and turn the outcome into the agent's text."""
    from mcp import Client

    cfg = settings()
    budget = ByteBudget(cfg.mcp.max_response_bytes)
    try:
        async with asyncio.timeout(cfg.mcp.timeout), AsyncExitStack() as stack:
            target = await open_transport(stack, server_url, cfg, budget)
            client = await stack.enter_async_context(
                Client(target, read_timeout_seconds=cfg.mcp.timeout)
            )
            result = await request(client)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the agent's Error: text
        if budget.refusal:
            return error(budget.refusal)
        if _is_timeout(_leaf(exc)):
            return error(
                f"MCP server did not answer within {cfg.mcp.timeout:g} s ([stdlib.mcp] timeout)"
            )
        # The SDK reports a transport failure in its own words (or as a parse error).
        return _cause_text(_leaf(exc))
    if budget.refusal:
        return error(budget.refusal)
    if isinstance(result, str) and result.startswith("Error: "):
        return result
    text = str(result)
    limit = cfg.mcp.max_result_chars
    if len(text) > limit:
        return error(
            f"MCP result is {len(text)} characters, over the limit of {limit} "
            "([stdlib.mcp] max_result_chars)"
        )
    return text


async def _all_pages(fetch: Callable[[str | None], Awaitable[Any]], field: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        items.extend(getattr(page, field))
        cursor = getattr(page, "next_cursor", None)
        if not cursor:
            break
    return items


def _url_problem(args: dict[str, Any]) -> str | None:
    return bad_args(args, ("server_url",), ("server_url",))


def _listing_action(kind: str, description: str) -> MAILAction:
    """`mcp_list_<kind>`: every page of the server's `list_<kind>` answer."""

    async def list_all(args: dict[str, Any]) -> str:
        problem = _url_problem(args)
        if problem:
            return problem
        return await _run(
            args["server_url"],
            lambda client: _all_pages(lambda c: getattr(client, f"list_{kind}")(cursor=c), kind),
        )

    name = f"mcp_list_{kind}"
    list_all.__name__ = list_all.__qualname__ = name
    return stdlib_action(name, description, PING_SCHEMA)(list_all)


@stdlib_action("mcp_ping", "Ping an MCP server.", PING_SCHEMA)
async def mcp_ping(args: dict[str, Any]) -> str:
    problem = _url_problem(args)
    if problem:
        return problem

    async def ping(client: Any) -> bool:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        # Newer protocol versions dropped `ping`: there a completed handshake is the answer.
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await client.send_ping()
        return True

    return await _run(args["server_url"], ping)


mcp_list_tools = _listing_action("tools", "List the tools of an MCP server.")


@stdlib_action("mcp_call_tool", "Call a tool of an MCP server.", CALL_TOOL_SCHEMA)
async def mcp_call_tool(args: dict[str, Any]) -> str:
    problem = bad_args(
        args,
        ("server_url", "tool_name", "tool_input"),
        ("server_url", "tool_name"),
        ("tool_input",),
    )
    if problem:
        return problem

    async def call(client: Any) -> CallToolResult | str:
        result = await client.call_tool(args["tool_name"], args["tool_input"])
        if result.is_error:
            texts = [getattr(block, "text", "") for block in result.content]
            return error("\n".join(t for t in texts if t) or "the tool reported an error")
        structured = result.structured_content
        data = structured
        if isinstance(structured, dict) and set(structured) == {"result"}:
            data = structured["result"]
        return CallToolResult(list(result.content), structured, data, False)

    return await _run(args["server_url"], call)


@stdlib_action("mcp_get_prompt", "Get a prompt from an MCP server.", GET_PROMPT_SCHEMA)
async def mcp_get_prompt(args: dict[str, Any]) -> str:
    problem = bad_args(
        args, ("server_url", "prompt_name"), ("server_url", "prompt_name"), ("arguments",)
    )
    if problem:
        return problem
    arguments = {str(k): str(v) for k, v in (args.get("arguments") or {}).items()}
    return await _run(
        args["server_url"],
        lambda client: client.get_prompt(args["prompt_name"], arguments or None),
    )


mcp_list_prompts = _listing_action("prompts", "List the prompts of an MCP server.")


@stdlib_action("mcp_read_resource", "Read a resource of an MCP server.", READ_RESOURCE_SCHEMA)
async def mcp_read_resource(args: dict[str, Any]) -> str:
    problem = bad_args(args, ("server_url", "resource_uri"), ("server_url", "resource_uri"))
    if problem:
        return problem

    async def read(client: Any) -> list[Any]:
        result = await client.read_resource(args["resource_uri"])
        return list(result.contents)

    return await _run(args["server_url"], read)


mcp_list_resources = _listing_action("resources", "List the resources of an MCP server.")
