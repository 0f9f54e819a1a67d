"""Tool handlers of the team tools, registered into the runtime's tool-handler table."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from mail.core.message import (
    ALL_AGENTS,
    MAILMessage,
    create_agent_address,
    make_broadcast,
    make_message,
    make_request,
    parse_agent_address,
)
from mail.core.team import files, threads
from mail.core.team.service import TeamError, TeamService
from mail.core.tool_handlers import TOOL_HANDLERS, Handler, handle_action, tool_handler
from mail.core.tools import AgentToolCall

if TYPE_CHECKING:
    from mail.core.runtime_ports import ToolHost, TurnContext


def _ok(details: str) -> str:
    return f"SUCCESS: {details}"


def _err(details: str) -> str:
    return f"ERROR: {details}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def team_tool(name: str, group: str) -> Any:
    """Register a handler that gets the TeamService; TeamError becomes an ERROR result."""

    def register(fn: Any) -> Handler:
        async def handler(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str | None:
            team: TeamService | None = getattr(rt, "team", None)
            if team is None or group not in team.groups(ctx.agent_name):
                # Not opted in: exactly what MAIL v1 does with an unknown tool (or a swarm
                # action that happens to have this name).
                return await handle_action(rt, ctx, call)
            # Like actions, team tools return information: the agent is called again after
            # the turn (the runtime's ::action_complete:: notice) to act on the result.
            ctx.actions_ran = True
            task = rt.mail_tasks.get(ctx.task_id)
            try:
                # (What it writes into the caller's folder is the task's, as an action's.)
                with rt.stored_bytes.storing_for(task, rt.observer.task_changed):
                    return _ok(await fn(team, ctx, call.tool_args))
            except TeamError as exc:
                rt._emit(ctx.task_id, "agent_error", f"{ctx.agent_name} {name}: {exc}")
                return _err(str(exc))

        handler.__name__ = f"handle_{name}"
        TOOL_HANDLERS[name] = handler
        return handler

    return register


# ---------------------------------------------------------------------------- reply_wait
_base_send_request = TOOL_HANDLERS["send_request"]
_base_send_response = TOOL_HANDLERS["send_response"]
_base_send_broadcast = TOOL_HANDLERS["send_broadcast"]


@tool_handler("send_request")
async def handle_send_request(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str | None:
    args = call.tool_args
    team: TeamService | None = getattr(rt, "team", None)
    if not args.get("wait_for_reply") or team is None:
        return await _base_send_request(rt, ctx, call)
    if "reply_wait" not in team.groups(ctx.agent_name):
        return await _base_send_request(rt, ctx, call)
    target = str(args.get("target", "")).strip()
    name, swarm = parse_agent_address(target)
    if not rt._is_local_swarm(swarm):
        return _err("wait_for_reply works only for agents of this swarm; send without it")
    try:
        timeout = team.clamp_timeout(args.get("timeout_seconds"))
        wait = team.register_wait(ctx.task_id, ctx.agent_name, name)
    except TeamError as exc:
        rt._emit(ctx.task_id, "agent_error", f"{ctx.agent_name} send_request: {exc}")
        ctx.actions_ran = True  # called again to read the error and do something else
        return _err(str(exc))
    try:
        sent = await _base_send_request(rt, ctx, call)
        if not sent or not sent.startswith("SUCCESS"):
            return sent
        rt._emit(
            ctx.task_id,
            "await_message",
            f"agent '{ctx.agent_name}' is waiting up to {timeout:g}s for a reply from {name}",
            {"reason": "wait_for_reply", "target": name, "timeout_seconds": timeout},
        )
        try:
            async with asyncio.timeout(timeout):
                reply = await wait.future
        except TimeoutError:
            result = _err(
                f"no reply from {name} within {timeout:g} seconds; its answer will reach you "
                "as a normal message when it comes"
            )
        else:
            payload: Any = reply["message"]
            result = _ok(
                f"reply from {name}\n<subject>{payload['subject']}</subject>\n"
                f"<body>{payload['body']}</body>"
            )
        ctx.actions_ran = True  # like an action: the agent is called again to act on it
        return result
    finally:
        team.drop_wait(wait)


@tool_handler("send_response")
async def handle_send_response(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str | None:
    team: TeamService | None = getattr(rt, "team", None)
    if team is None or not team._waits:
        return await _base_send_response(rt, ctx, call)
    args = call.tool_args
    target = str(args.get("target", "")).strip()
    name, swarm = parse_agent_address(target)
    wait = (
        team.waiting_for(ctx.task_id, name, ctx.agent_name) if rt._is_local_swarm(swarm) else None
    )
    if wait is None or rt.disallowed_targets(ctx.agent_name, [target]):
        return await _base_send_response(rt, ctx, call)
    payload = make_request(
        ctx.task_id,
        create_agent_address(ctx.agent_name),
        create_agent_address(name),
        str(args.get("subject", "")),
        str(args.get("body", "")),
    )
    message: MAILMessage = make_message(payload, "response")
    outstanding = rt.outstanding_requests.setdefault(ctx.task_id, {})
    if outstanding.get(name, 0) > 0:
        outstanding[name] -= 1
    rt._emit(
        ctx.task_id,
        "new_message",
        f"reply from {ctx.agent_name} handed to {name} as the result of its waiting request",
        {"full_message": message, "wait_for_reply": True},
    )
    wait.future.set_result(message)
    await team.record_message(name, message, kind="reply")
    return _ok(f"reply delivered to {name} (it was waiting for it)")


@tool_handler("send_broadcast")
async def handle_send_broadcast(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str | None:
    team: TeamService | None = getattr(rt, "team", None)
    if team is None or not team.groups(ctx.agent_name):
        return await _base_send_broadcast(rt, ctx, call)
    args = call.tool_args
    targets = args.get("targets")
    others = [name for name in rt.agents if name != ctx.agent_name]
    if targets is None or targets == [] or targets == ALL_AGENTS:
        recipients = others
    elif not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        return _err('targets must be a list of agent names (or ["all"])')
    elif ALL_AGENTS in targets:
        recipients = others
    else:
        parsed = [parse_agent_address(t.strip()) for t in targets]
        names = [n for n, _ in parsed]
        # `worker@other-swarm` is not our `worker`: only this swarm's agents are known here.
        unknown = [
            t
            for t, (n, s) in zip(targets, parsed, strict=True)
            if n not in rt.agents or not rt._is_local_swarm(s)
        ]
        if unknown:
            rt._emit(ctx.task_id, "agent_error", f"broadcast to unknown agents: {unknown}")
            return _err(
                f"unknown broadcast targets: {', '.join(unknown)}. Valid names: "
                + ", ".join(others)
            )
        recipients = list(dict.fromkeys(n for n in names if n != ctx.agent_name))
    if not recipients:
        return _err("nobody to deliver to: you never receive your own broadcast")
    payload = make_broadcast(
        ctx.task_id,
        create_agent_address(ctx.agent_name),
        [create_agent_address(r) for r in recipients],
        str(args.get("subject", "")),
        str(args.get("body", "")),
    )
    rt.mailbox.put(make_message(payload, "broadcast"))
    return _ok("broadcast delivered to: " + ", ".join(recipients))


# ---------------------------------------------------------------------------- threads
@team_tool("create_thread", "threads")
async def _create_thread(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    thread = await threads.create_thread(
        team,
        ctx.agent_name,
        ctx.task_id,
        args.get("title"),
        args.get("participants"),
        args.get("initial_message"),
    )
    return f"thread created: {_json(thread)}"


@team_tool("join_thread", "threads")
async def _join_thread(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    return await threads.join_thread(team, ctx.agent_name, ctx.task_id, args.get("thread_id"))


@team_tool("add_participant_to_thread", "threads")
async def _add_participant(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    return await threads.add_participant(
        team, ctx.agent_name, ctx.task_id, args.get("thread_id"), args.get("agent")
    )


@team_tool("remove_participant_from_thread", "threads")
async def _remove_participant(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    return await threads.remove_participant(
        team, ctx.agent_name, ctx.task_id, args.get("thread_id"), args.get("agent")
    )


@team_tool("get_thread_details", "threads")
async def _thread_details(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    return _json(await threads.thread_details(team, args.get("thread_id")))


@team_tool("post_to_thread", "threads")
async def _post_to_thread(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    post = await threads.post_to_thread(
        team,
        ctx.agent_name,
        ctx.task_id,
        args.get("thread_id"),
        args.get("body"),
        args.get("urgent"),
    )
    how = "woken now" if post["urgent"] else "shown at the start of their next turn"
    return f"posted {post['post_id']} to thread {post['thread_id']}; participants are {how}"


# ---------------------------------------------------------------------------- inbox
@team_tool("get_messages", "inbox")
async def _get_messages(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    limit = args.get("limit")
    if limit is None:
        limit = 10
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 1:
        raise TeamError("limit must be a positive number")
    since = args.get("since")
    if since is not None and not isinstance(since, str):
        raise TeamError("since must be an ISO 8601 time such as 2025-03-30T12:00:00Z")
    if isinstance(since, str):
        since = _normalise_time(since)
    thread_id = args.get("thread_id") or None
    entries = await team.get_messages(ctx.agent_name, thread_id, min(int(limit), 100), since)
    return _json([_public_entry(e) for e in entries])


@team_tool("check_new_messages", "inbox")
async def _check_new(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    counts = await team.unread_for(ctx.agent_name)
    total = sum(counts.values())
    direct = counts.get("direct", 0)
    per_thread = {k: v for k, v in counts.items() if k != "direct"}
    return _json({"unread": total, "direct": direct, "threads": per_thread})


def _public_entry(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("entry_id", "kind", "thread_id", "sender", "subject", "body", "task_id", "timestamp")
    out = {k: entry.get(k) for k in keep}
    out["was_read"] = bool(entry.get("read"))
    if entry.get("attachments"):
        out["attachments"] = entry["attachments"]
    return out


def _normalise_time(value: str) -> str:
    from mail.store.base import normalize_start_time

    try:
        return normalize_start_time(value)
    except ValueError as exc:
        raise TeamError(str(exc)) from None


# ---------------------------------------------------------------------------- files
@team_tool("transfer_file", "files")
async def _transfer_file(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    record, target = await files.transfer_file(
        team,
        ctx.agent_name,
        ctx.task_id,
        args.get("recipient"),
        args.get("source_path"),
        args.get("destination_filename"),
        args.get("description"),
    )
    meta = files.attachment_meta(record)
    if target == "user":
        return f"file stored for the user (download: GET /attachments/{meta['id']}): {_json(meta)}"
    return f"file sent to {target}: {_json(meta)}"


@team_tool("read_attachment", "files")
async def _read_attachment(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    return await files.read_attachment(team, ctx.agent_name, args.get("attachment_id"))


@team_tool("save_attachment", "files")
async def _save_attachment(team: TeamService, ctx: TurnContext, args: dict[str, Any]) -> str:
    where = await files.save_attachment(
        team, ctx.agent_name, args.get("attachment_id"), args.get("path")
    )
    return f"saved to {where} in your working folder"
