"""One handler per MAIL tool, registered by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mail.core.actions import running_step
from mail.core.events import ArgsText, Description, MessageText, latest_call_args
from mail.core.help_text import build_help_text, load_protocol_text
from mail.core.instance_context import acting_for
from mail.core.memory import acknowledgement_entries
from mail.core.message import (
    ALL_AGENTS,
    MAILMessage,
    build_mail_xml,
    create_agent_address,
    make_broadcast,
    make_interrupt,
    make_message,
    make_request,
    parse_agent_address,
)
from mail.core.runtime_ports import Handler, ToolHost, TurnContext
from mail.core.stored_bytes import text_bytes
from mail.core.system_messages import (
    improper_response_to_user_body,
    invalid_recipient_body,
    swarm_name_recipient_body,
    system_broadcast,
    system_response,
    unknown_agent_body,
)
from mail.core.tasks import MAILTask
from mail.core.tools import AgentToolCall

TOOL_HANDLERS: dict[str, Handler] = {}


def tool_handler(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        TOOL_HANDLERS[name] = fn
        return fn

    return register


def _ok(details: str = "") -> str:
    return f"SUCCESS: {details}" if details else "SUCCESS"


def _err(details: str = "") -> str:
    return f"ERROR: {details}" if details else "ERROR"


def notify(rt: ToolHost, ctx: TurnContext, message: MAILMessage) -> None:
    """Queue a runtime notice for the calling agent (it gets another turn to read it)."""
    ctx.notices += 1
    rt.mailbox.put(message)


def _tool_call_error(rt: ToolHost, ctx: TurnContext, event_text: str, body: str) -> None:
    rt._emit(ctx.task_id, "agent_error", event_text)
    notify(
        rt,
        ctx,
        system_response(rt.swarm_name, ctx.task_id, ctx.agent_name, "::tool_call_error::", body),
    )


# ---------------------------------------------------------------------------- sending
def _check_target(rt: ToolHost, ctx: TurnContext, target: str) -> tuple[str, str, str] | None:
    """(notice subject, notice body, tool result) if `target` can't be reached, else None."""
    name, swarm = parse_agent_address(target)
    if not name:
        return "::invalid_recipient::", "The target is empty.", "the target is empty"
    local = rt._is_local_swarm(swarm)
    if local and name == rt.user_id:
        rt._emit(
            ctx.task_id,
            "agent_error",
            f"agent {ctx.agent_name} attempted to send a message to the user ({rt.user_id})",
        )
        body = improper_response_to_user_body(rt.user_id)
        return "::improper_response_to_user::", body, body
    if local and name == rt.swarm_name:
        rt._emit(
            ctx.task_id,
            "agent_error",
            f"agent {ctx.agent_name} attempted to message the swarm itself ({name})",
        )
        return (
            "::invalid_recipient::",
            swarm_name_recipient_body(name),
            f"'{name}' is the swarm itself, not an agent",
        )
    if rt.disallowed_targets(ctx.agent_name, [target]):
        rt._emit(
            ctx.task_id,
            "agent_error",
            f"agent attempted to contact disallowed recipients: {[target]}",
        )
        targets = rt.agents[ctx.agent_name].comm_targets
        return (
            "::invalid_recipient::",
            invalid_recipient_body([target], targets),
            f"'{target}' is not one of your communication targets",
        )
    if local and name not in rt.agents and name != ALL_AGENTS:
        rt._emit(
            ctx.task_id,
            "agent_error",
            f"agent {name} is unknown; message from {ctx.agent_name} cannot be delivered to it",
        )
        body = unknown_agent_body(name, rt.agents[ctx.agent_name].comm_targets)
        return "::invalid_recipient::", body, body
    return None


def _routing_hints(rt: ToolHost, target: str) -> dict[str, Any]:
    # (The task names the swarm among its remote swarms when the message is sent to it:
    # net/bridge.py.)
    _, swarm = parse_agent_address(target)
    return {} if rt._is_local_swarm(swarm) else {"remote_swarm": swarm}


async def _send_direct(rt: ToolHost, ctx: TurnContext, call: AgentToolCall, kind: str) -> str:
    args = call.tool_args
    try:
        target = str(args["target"]).strip()
        subject = str(args.get("subject", ""))
        body = str(args.get("body", ""))
    except KeyError as exc:
        _tool_call_error(
            rt,
            ctx,
            f"error sending message for agent {ctx.agent_name}: missing {exc}",
            f"Your {call.tool_name} call is missing the argument {exc}.",
        )
        return _err(f"error sending message: missing argument {exc}")
    problem = _check_target(rt, ctx, target)
    if problem is not None:
        subject, notice, result = problem
        notify(
            rt, ctx, system_response(rt.swarm_name, ctx.task_id, ctx.agent_name, subject, notice)
        )
        return _err(result)
    sender = create_agent_address(ctx.agent_name)
    hints = _routing_hints(rt, target)
    recipient = create_agent_address(target)
    message: MAILMessage
    if kind == "interrupt":
        payload: Any = make_interrupt(
            ctx.task_id,
            sender,
            [recipient],
            subject,
            body,
            routing_info=hints,
            interrupt_id=ctx.sent_id(call, "interrupt"),
        )
        message = make_message(payload, "interrupt", message_id=ctx.sent_id(call))
    else:
        request_id = ctx.sent_id(call, "request")
        payload = make_request(
            ctx.task_id, sender, recipient, subject, body, routing_info=hints, request_id=request_id
        )
        message = make_message(payload, kind, message_id=ctx.sent_id(call))
    outstanding = rt.outstanding_requests.get(ctx.task_id)
    if outstanding is None:
        outstanding = rt.outstanding_requests[ctx.task_id] = {}
    if kind == "request":
        outstanding[ctx.agent_name] = outstanding.get(ctx.agent_name, 0) + 1
    elif kind == "response":
        # Only a local target's count: `supervisor@beta` is not our `supervisor`.
        target_name, target_swarm = parse_agent_address(target)
        if rt._is_local_swarm(target_swarm) and outstanding.get(target_name, 0) > 0:
            outstanding[target_name] -= 1
    rt._prechecked.add(message["id"])  # comm_targets already checked above
    rt.mailbox.put(message)
    return _ok("message sent")


@tool_handler("send_request")
async def handle_send_request(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    return await _send_direct(rt, ctx, call, "request")


@tool_handler("send_response")
async def handle_send_response(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    return await _send_direct(rt, ctx, call, "response")


@tool_handler("send_interrupt")
async def handle_send_interrupt(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    return await _send_direct(rt, ctx, call, "interrupt")


@tool_handler("send_broadcast")
async def handle_send_broadcast(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    args = call.tool_args
    payload = make_broadcast(
        ctx.task_id,
        create_agent_address(ctx.agent_name),
        [create_agent_address(ALL_AGENTS)],
        str(args.get("subject", "")),
        str(args.get("body", "")),
    )
    rt.mailbox.put(make_message(payload, "broadcast"))
    return _ok("message sent")


# ---------------------------------------------------------------------------- completion
@tool_handler("task_complete")
async def handle_task_complete(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    agent = rt.agents[ctx.agent_name]
    if not agent.can_complete_tasks:
        _tool_call_error(
            rt,
            ctx,
            f"agent {ctx.agent_name} called task_complete but cannot complete tasks",
            "You are not allowed to complete tasks; report your result to the agent that "
            "asked you instead.",
        )
        return _err(f"agent '{ctx.agent_name}' is not allowed to complete tasks")
    finish = call.tool_args.get("finish_message") or "Task completed successfully"
    task = rt._ensure_task(ctx.task_id)
    if task.completed:
        rt._emit(
            ctx.task_id,
            "task_complete_call_duplicate",
            f"agent {ctx.agent_name} called task_complete on already completed task",
        )
        return _ok("task already completed")
    payload = make_broadcast(
        ctx.task_id,
        create_agent_address(ctx.agent_name),
        [create_agent_address(ALL_AGENTS)],
        "::task_complete::",
        str(finish),
        sender_swarm=rt.swarm_name,
        recipient_swarms=[rt.swarm_name],
        broadcast_id=ctx.sent_id(call, "broadcast"),
    )
    response = make_message(payload, "broadcast_complete", message_id=ctx.sent_id(call))
    rt._emit(
        ctx.task_id,
        "task_complete_call",
        f"agent {ctx.agent_name} called task_complete, full response to follow",
    )
    rt._emit(
        ctx.task_id,
        "new_message",
        MessageText(f"task_complete response from {ctx.agent_name}:\n", response),
        {"full_message": response},
    )
    rt._complete_task(ctx.task_id, response)
    if rt.interswarm is not None:
        rt.interswarm.task_completed(ctx.task_id, response)
    return _ok("task completed")


# ---------------------------------------------------------------------------- broadcasts
@tool_handler("acknowledge_broadcast")
async def handle_acknowledge(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    broadcasts = [m for m in ctx.batch if m["msg_type"] == "broadcast"]
    if not broadcasts:
        _tool_call_error(
            rt,
            ctx,
            f"agent {ctx.agent_name} called acknowledge_broadcast on a non-broadcast message",
            "`acknowledge_broadcast` only applies to broadcasts; the message you received "
            "is not one. Reply with send_response or send_request instead.",
        )
        return _err("improper use of `acknowledge_broadcast`")
    note = call.tool_args.get("note")
    try:
        # Two entries per broadcast of the turn, as the agent lived them: the broadcast,
        # then its acknowledgement.
        for broadcast in broadcasts:
            entries = acknowledgement_entries(build_mail_xml(broadcast)["content"], note)
            key = broadcast["id"]
            for suffix, entry in zip(("broadcast", "ack"), entries, strict=True):
                await rt.memory.put(
                    ctx.agent_name, f"{key}-{suffix}", {**entry, "task_id": ctx.task_id}
                )
    except Exception as exc:  # noqa: BLE001 - memory trouble is reported, not fatal
        rt._emit(
            ctx.task_id,
            "agent_error",
            f"error acknowledging broadcast for agent {ctx.agent_name}: {exc}",
        )
        return _err(f"could not store the broadcast: {exc}")
    return _ok("broadcast acknowledged")


@tool_handler("ignore_broadcast")
async def handle_ignore(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    rt._emit(ctx.task_id, "broadcast_ignored", f"agent {ctx.agent_name} called ignore_broadcast")
    return _ok("broadcast ignored")


@tool_handler("await_message")
async def handle_await(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    reason = call.tool_args.get("reason")
    waiting_on = rt.outstanding_requests.get(ctx.task_id, {}).get(ctx.agent_name, 0)
    others_busy = rt.other_turns_running(ctx.task_id) or rt.mailbox.has_task(ctx.task_id)
    # A broadcast to other swarms is not a request, but their answers are on their way.
    bridge = rt.interswarm
    remote_pending = bridge is not None and bridge.is_waiting(ctx.task_id, ctx.agent_name)
    if waiting_on == 0 and not others_busy and not remote_pending:
        _tool_call_error(
            rt,
            ctx,
            f"agent {ctx.agent_name} called await_message but has no outstanding requests "
            "and message queue is empty",
            "Nothing is on its way to you: you have no outstanding requests and no messages "
            "are queued for this task. Send a request, respond, or complete the task.",
        )
        return _err("no outstanding requests and message queue is empty")
    text = f"agent '{ctx.agent_name}' is awaiting a new message"
    rt._emit(
        ctx.task_id,
        "await_message",
        f"{text}: {reason}" if reason else text,
        {"reason": reason} if reason else {},
    )
    return _ok(
        f"waiting for a new message (reason: '{reason}')" if reason else "waiting for a new message"
    )


@tool_handler("help")
async def handle_help(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    args = call.tool_args
    rt._emit(ctx.task_id, "help_called", f"agent {ctx.agent_name} called help")
    text = build_help_text(
        ctx.agent_name,
        rt.swarm_name,
        get_summary=bool(args.get("get_summary", True)),
        get_identity=bool(args.get("get_identity", False)),
        get_tool_help=list(args.get("get_tool_help") or []),
        get_full_protocol=bool(args.get("get_full_protocol", False)),
        protocol_text=load_protocol_text() if args.get("get_full_protocol") else None,
    )
    notify(
        rt, ctx, system_broadcast(rt.swarm_name, ctx.task_id, [ctx.agent_name], "::help::", text)
    )
    return _ok("help string generated; will be sent to you in a subsequent prompt")


# ---------------------------------------------------------------------------- synthetic calls
@tool_handler("text_output")
async def handle_text_output(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> None:
    """Plain text where the runtime asked for it (`tool_choice` "auto": manual mode); in any
    other turn it is refused before it gets here (runtime_turns `_missing_call`)."""
    body = str(call.tool_args.get("body") or call.tool_args.get("content") or "")
    incoming: Any = ctx.message["message"]
    # Where plain text goes is the runtime's choice (a manual step names it); routing_info
    # of anyone else's message (a peer's envelope carries its own) never steers it.
    manual = incoming["sender"]["address_type"] == "system"
    routing = (incoming.get("routing_info") or {}) if manual else {}
    kind = routing.get("manual_response_type", "broadcast")
    targets = list(routing.get("manual_response_targets") or [ALL_AGENTS])
    waiter = rt.manual_return_messages.get(f"{ctx.task_id}::{ctx.agent_name}")
    sender = create_agent_address(ctx.agent_name)
    message: MAILMessage
    if kind == "broadcast":
        payload: Any = make_broadcast(
            ctx.task_id, sender, [create_agent_address(t) for t in targets], "", body
        )
        message = make_message(payload, "broadcast")
    else:
        payload = make_request(ctx.task_id, sender, create_agent_address(targets[0]), "", body)
        message = make_message(payload, kind)
    if waiter is not None and not waiter.done():
        waiter.set_result(message)
    rt.mailbox.put(message)


async def _builtin(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> None:
    if call.tool_name == "web_search_call":
        text = f"agent {ctx.agent_name} used web_search with query: {call.tool_args.get('query')}"
    else:
        text = f"agent {ctx.agent_name} used code_interpreter"
    rt._emit(
        ctx.task_id,
        "builtin_tool_call",
        text,
        {"tool_type": call.tool_name, "tool_args": call.tool_args},
    )


TOOL_HANDLERS["web_search_call"] = _builtin
TOOL_HANDLERS["code_interpreter_call"] = _builtin


# ---------------------------------------------------------------------------- interswarm tools
async def _interswarm_off(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    """Without interswarm, an action of the tool's name runs (as in v1.3), else an error."""
    if call.tool_name in rt.actions:
        return await handle_action(rt, ctx, call)
    return _err("interswarm messaging is not enabled for this swarm")


@tool_handler("send_interswarm_broadcast")
async def handle_interswarm_broadcast(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    if not rt.enable_interswarm or rt.interswarm is None:
        return await _interswarm_off(rt, ctx, call)
    return await rt.interswarm.broadcast_tool(ctx, call)


@tool_handler("discover_swarms")
async def handle_discover(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    if not rt.enable_interswarm or rt.interswarm is None:
        return await _interswarm_off(rt, ctx, call)
    result: str = await rt.interswarm.discover_tool(ctx, call)
    # What was found is news the agent has to act on: it is called again to read it (an
    # error gets the ::action_error:: turn of the runtime's result rule instead).
    if result.startswith("SUCCESS"):
        ctx.actions_ran = True
    return result


# ---------------------------------------------------------------------------- actions
# A result this short is never refused for the caller's stored bytes (the refusal's own text
# would take as much).
_SMALL_RESULT = 1024


def _action_call_text(task: MAILTask | None, agent: str, call: AgentToolCall) -> Description:
    """The `action_call` description: its prefix and the call's arguments as JSON. When the
    latest `tool_call` event of the call holds these very arguments (not a reviewer's edit),
    the store keeps them once, there (`ArgsText`)."""
    prefix = f"agent {agent} executing action tool: {call.tool_name} with args: "
    if task is not None and latest_call_args(task.events).get(call.tool_call_id) is call.tool_args:
        return ArgsText(prefix, call.tool_args, call.tool_call_id)
    args = call.tool_args
    return lambda: prefix + json.dumps(args)


async def handle_action(rt: ToolHost, ctx: TurnContext, call: AgentToolCall) -> str:
    name = call.tool_name
    action = rt.actions.get(name)
    if action is None:
        rt._emit(ctx.task_id, "action_error", f"action {name} not found")
        ctx.action_errors.append((name, f"The action '{name}' does not exist in this swarm."))
        return _err("action not found")
    if name not in rt.agents[ctx.agent_name].actions:
        rt._emit(ctx.task_id, "action_error", f"agent {ctx.agent_name} cannot access action {name}")
        ctx.action_errors.append((name, f"The action '{name}' is not available to you."))
        return _err("agent cannot access action")
    stored = rt.stored_bytes
    full = stored.refusal(0)  # an earlier call of this turn passed the caller's bound
    if full is not None:
        rt._emit(ctx.task_id, "action_error", f"action {name} not run: {full}")
        ctx.action_errors.append((name, f"not run: {full}"))
        return _err(f"not run: {full}")
    task = rt.mail_tasks.get(ctx.task_id)
    rt._emit(ctx.task_id, "action_call", _action_call_text(task, ctx.agent_name, call))
    try:
        with (
            acting_for(str(rt.user_role), str(rt.user_id)),
            stored.storing_for(task, rt.observer.task_changed),
            running_step(ctx.task_id, call.tool_call_id),
        ):
            status, result = await action.execute(call, rt.actions, rt.action_override)
    except Exception as exc:  # noqa: BLE001 - execute should not raise, but never trust it
        rt._emit(
            ctx.task_id,
            "action_error",
            f"action error (caller = {ctx.agent_name}, tool = {name}):\n{exc}",
        )
        ctx.action_errors.append((name, str(exc)))
        return _err(str(exc))
    content = str(result.get("content", ""))
    # Its result is stored twice (the event below and the agent's history).
    too_much = None
    if stored.ledger is not None and len(content) > _SMALL_RESULT:  # no bound: nothing to size
        too_much = stored.refusal(2 * text_bytes(content))
    if too_much is not None:
        status, content = (
            "error",
            f"its result ({len(content)} characters) was not kept: {too_much}",
        )
    rt._emit(
        ctx.task_id, "action_complete", f"action complete (caller = {ctx.agent_name}):\n{content}"
    )
    ctx.actions_ran = True
    if status != "success":
        ctx.action_errors.append((name, content))
        return _err(content)
    return _ok(content)
