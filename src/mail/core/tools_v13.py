"""Module-level helpers v1.3's ``mail.core.tools`` had, for agent functions written against it.

factories.md tells authors of custom agent functions to reuse ``pydantic_function_tool`` and
``_make_tools`` rather than convert tool specs themselves; the others were public functions
of that module. ``mail.core.tools`` re-exports every name here. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from mail.core.help_text import tool_help_text
from mail.core.message import (
    MAILMessage,
    create_agent_address,
    make_broadcast,
    make_message,
    make_request,
)


def get_tool_spec_name(tool: Mapping[str, Any]) -> str | None:
    """The name of a tool spec in either layout (Responses or Chat Completions), or None."""
    name = tool.get("name")
    if isinstance(name, str):
        return name
    function = tool.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return str(function["name"])
    return None


def _make_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions function tools (``pydantic_function_tool``'s shape) in the Responses
    layout; tools of other types are passed on as they are.

    v1.3 re-exported the OpenAI SDK's private helper of this name, which only accepted the
    SDK's own ``pydantic_function_tool`` objects; plain dicts of that shape work here too.
    """
    converted: list[dict[str, Any]] = []
    for tool in tools:
        if tool.get("type") != "function" or not isinstance(tool.get("function"), Mapping):
            converted.append(dict(tool))
            continue
        function = tool["function"]
        if "parameters" not in function:
            raise ValueError(f"function tool {function.get('name')!r} has no parameters")
        converted.append(
            {
                "type": "function",
                "name": function["name"],
                "description": function.get("description"),
                "parameters": function["parameters"],
                "strict": bool(function.get("strict") or False),
            }
        )
    return converted


def get_tool_help(tools: list[str]) -> str:
    """The help text of each named MAIL tool, one section per tool (as the `help` tool shows)."""
    return tool_help_text(tools)


def convert_manual_step_call_to_mail_message(
    call: Any,
    sender: str,
    task_id: str,
    response_targets: list[str],
    response_type: Literal["broadcast", "response", "request"],
) -> MAILMessage:
    """The message a manual step's answer becomes: `call.tool_args`' ``subject`` and ``body``
    (or ``content``, a text answer's) from agent `sender` to `response_targets` (a request
    or response goes to the first target, a broadcast to all of them)."""
    if not response_targets:
        raise ValueError("response_targets must name at least one recipient")
    args = call.tool_args
    subject = args.get("subject", "")
    body = args.get("body") or args.get("content", "")
    source = create_agent_address(sender)
    targets = [create_agent_address(target) for target in response_targets]
    if response_type == "broadcast":
        payload: Any = make_broadcast(task_id, source, targets, subject, body)
    elif response_type in ("request", "response"):
        payload = make_request(task_id, source, targets[0], subject, body)
    else:
        raise ValueError(f"invalid response_type '{response_type}'")
    return make_message(payload, response_type)
