"""Tool specs of the team tools (pure): which tools a `team_tools` opt-in offers, and their schemas."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import Field

from mail.core.tools import ToolStyle, _build, _cached_tool, _target_field

TEAM_TOOL_GROUPS: dict[str, tuple[str, ...]] = {
    "reply_wait": ("send_request",),
    "threads": (
        "create_thread",
        "join_thread",
        "add_participant_to_thread",
        "remove_participant_from_thread",
        "get_thread_details",
        "post_to_thread",
    ),
    "inbox": ("get_messages", "check_new_messages"),
    "files": ("transfer_file", "read_attachment", "save_attachment"),
}
"""Opt-in group -> the tools it offers (``reply_wait`` upgrades ``send_request``)."""

TEAM_TOOL_NAMES: frozenset[str] = frozenset(
    name for names in TEAM_TOOL_GROUPS.values() for name in names if name != "send_request"
)
"""Tools that exist only for agents that opted in (handled by the team handlers)."""


def validate_team_tools(value: Any, agent: str = "") -> list[str]:
    """The groups of a ``team_tools`` setting, or ValueError naming what is wrong."""
    where = f"agent '{agent}': " if agent else ""
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}'team_tools' must be a list of strings")
    groups: list[str] = []
    for item in value:
        if item not in TEAM_TOOL_GROUPS:
            from difflib import get_close_matches

            close = get_close_matches(item, list(TEAM_TOOL_GROUPS), n=1, cutoff=0.5)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ValueError(
                f"{where}unknown team_tools entry '{item}'.{hint} Valid entries: "
                + ", ".join(TEAM_TOOL_GROUPS)
            )
        if item not in groups:
            groups.append(item)
    return groups


def _opt(kind: Any, description: str, default: Any = None) -> tuple[Any, Any]:
    return (kind | None, Field(default=default, description=description))


def _req(kind: Any, description: str) -> tuple[Any, Any]:
    return (kind, Field(description=description))


def _names_hint(targets: Sequence[str]) -> str:
    return f" Agents you usually work with: {', '.join(targets)}." if targets else ""


@_cached_tool
def create_waiting_request_tool(
    targets: tuple[str, ...], enable_interswarm: bool, style: ToolStyle
) -> dict[str, Any]:
    """``send_request`` with ``wait_for_reply`` / ``timeout_seconds`` (reply_wait)."""
    return _build(
        "send_request",
        "Send a request to another agent: ask it for information or hand it a piece of work. "
        "With wait_for_reply=true its send_response becomes the result of this call (you "
        "see the answer at once, no extra message); otherwise the answer arrives later as a "
        "message, and you may call await_message meanwhile.",
        style,
        target=_target_field(targets, enable_interswarm),
        subject=_req(str, "Short subject line summarising the request."),
        body=_req(str, "Full text of the request; include every detail the recipient needs."),
        wait_for_reply=_opt(
            bool, "Wait for the recipient's send_response and get it as this call's result."
        ),
        timeout_seconds=_opt(
            float,
            "How long to wait for the reply (seconds; default and cap set by the swarm). On "
            "timeout the call says so and a late reply arrives as a normal message.",
        ),
    )


@_cached_tool
def create_targeted_broadcast_tool(style: ToolStyle) -> dict[str, Any]:
    """``send_broadcast`` that honours ``targets`` and never reaches the sender."""
    return _build(
        "send_broadcast",
        "Send the same message to several agents at once (you never receive your own "
        "broadcast). The result lists who it was delivered to. A broadcast asks for no reply.",
        style,
        subject=_req(str, "Short subject line summarising the broadcast."),
        body=_req(str, "Full text of the broadcast; include every detail readers need."),
        targets=_req(
            list[str], 'Agent names to reach; ["all"] (or an empty list) means every agent.'
        ),
    )


@functools.lru_cache(maxsize=64)
def _thread_tools(targets: tuple[str, ...], style: ToolStyle) -> tuple[dict[str, Any], ...]:
    hint = _names_hint(targets)
    thread_id = _req(str, "Id of the thread (as returned by create_thread, e.g. th_1a2b...).")
    return (
        _build(
            "create_thread",
            "Open a named group conversation (thread) with other agents. You are added as its "
            "creator. Participants see posts quietly at the start of their next turn.",
            style,
            title=_req(str, "Concise title of the thread."),
            participants=_req(list[str], "Agent names to include (besides you)." + hint),
            initial_message=_opt(str, "Optional first post of the thread."),
        ),
        _build(
            "join_thread",
            "Join an existing thread so that you receive its posts.",
            style,
            thread_id=thread_id,
        ),
        _build(
            "add_participant_to_thread",
            "Add an agent to a thread you take part in.",
            style,
            thread_id=thread_id,
            agent=_req(str, "Name of the agent to add." + hint),
        ),
        _build(
            "remove_participant_from_thread",
            "Remove an agent from a thread: yourself, or anyone if you created the thread. "
            "The creator cannot be removed.",
            style,
            thread_id=thread_id,
            agent=_req(str, "Name of the agent to remove."),
        ),
        _build(
            "get_thread_details",
            "Title, creator, participants and recent posts of a thread.",
            style,
            thread_id=thread_id,
        ),
        _build(
            "post_to_thread",
            "Post a message to a thread you take part in. Normal posts reach the other "
            "participants at the start of their next turn; urgent posts wake them at once.",
            style,
            thread_id=thread_id,
            body=_req(str, "Text of the post."),
            urgent=_opt(bool, "Wake every other participant now (use sparingly)."),
        ),
    )


@functools.lru_cache(maxsize=64)
def _inbox_tools(style: ToolStyle) -> tuple[dict[str, Any], ...]:
    return (
        _build(
            "get_messages",
            "Messages you received (direct messages and thread posts), most recent first. "
            "The returned messages are marked read.",
            style,
            thread_id=_opt(str, "Only messages of this thread."),
            limit=_opt(int, "Maximum number of messages (default 10)."),
            since=_opt(str, "Only messages after this ISO 8601 time, e.g. 2025-03-30T12:00:00Z."),
        ),
        _build(
            "check_new_messages",
            "How many unread messages you have, per thread and direct.",
            style,
        ),
    )


@functools.lru_cache(maxsize=64)
def _file_tools(targets: tuple[str, ...], style: ToolStyle) -> tuple[dict[str, Any], ...]:
    hint = _names_hint(targets)
    return (
        _build(
            "transfer_file",
            "Hand a file from your working folder to another agent (or to the user) through "
            "the server. The recipient gets a message listing the attachment.",
            style,
            recipient=_req(str, "Agent name, or 'user' for the person running the task." + hint),
            source_path=_req(str, "Path of the file, relative to your working folder."),
            destination_filename=_opt(str, "Name the recipient sees (default: the file's name)."),
            description=_opt(str, "What the file is."),
        ),
        _build(
            "read_attachment",
            "Read an attachment you received as text.",
            style,
            attachment_id=_req(str, "Id of the attachment (att_...)."),
        ),
        _build(
            "save_attachment",
            "Save an attachment you received into your working folder.",
            style,
            attachment_id=_req(str, "Id of the attachment (att_...)."),
            path=_req(str, "Destination path, relative to your working folder."),
        ),
    )


def team_tool_specs(
    groups: Iterable[str],
    targets: Sequence[str],
    style: ToolStyle = "responses",
    enable_interswarm: bool = False,
    exclude_tools: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The tool specs an agent with these ``team_tools`` groups is offered, in `style`."""
    chosen = set(groups)
    if not chosen:
        return []
    excluded = set(exclude_tools)
    key = tuple(targets)
    specs: list[dict[str, Any]] = []
    if "reply_wait" in chosen and "send_request" not in excluded and targets:
        specs.append(create_waiting_request_tool(key, enable_interswarm, style))
    if "send_broadcast" not in excluded and targets:
        specs.append(create_targeted_broadcast_tool(style))
    if "threads" in chosen:
        specs.extend(copy.deepcopy(_thread_tools(key, style)))
    if "inbox" in chosen:
        specs.extend(copy.deepcopy(_inbox_tools(style)))
    if "files" in chosen:
        specs.extend(copy.deepcopy(_file_tools(key, style)))
    return [s for s in specs if _name(s) not in excluded]


def _name(spec: dict[str, Any]) -> str:
    return str(spec.get("name") or spec.get("function", {}).get("name"))
