"""MCP tools that act as the caller (a user of the swarm), and the MCP resources."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from mail.mcp_face import replies
from mail.mcp_face.face import Face, resource_error, tool_error
from mail.server import messaging, task_reads, team
from mail.server.bodies import parse_message_request
from mail.server.swarm_description import describe_swarm
from mail.utils.background import hold

logger = logging.getLogger("mail.mcp")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _finished_in_background(task: asyncio.Task[None]) -> None:
    """A task started by post_message(wait=false) that failed after it was stored (its
    caller reads how it ended with get_task): logged, not left unretrieved."""
    if not task.cancelled() and task.exception() is not None:
        logger.warning("a task started without waiting failed: %r", task.exception())


def _cut_event(event: Any, room: int) -> Any:
    """An event too large for an answer: its strings cut, or (when even that is too
    large) only its name, so paging always moves on."""
    cut = replies.cut_strings(event, room)
    if cut is not None:
        return cut
    name = event.get("event") if isinstance(event, dict) else None
    return {"event": name, "omitted": f"too large for one answer ({replies.SETTING})"}


def threads_page(threads: list[Any], first: str, budget: int) -> str:
    """The threads from index `first` that fit in `budget` bytes, and where the next page
    starts (``next``, null at the end)."""
    try:
        start = int(first)
    except ValueError:
        start = -1
    if start < 0:
        raise resource_error(ValueError("first must be a number, 0 or more"))
    rest = threads[start:]
    shell = {"first": start, "next": replies.WIDEST_COUNT, "total": len(threads)}
    answer, count = replies.pack(shell, "threads", rest, budget, _cut_thread)
    answer["next"] = start + count if count < len(rest) else None
    return replies.dumps(answer)


def _cut_thread(thread: Any, room: int) -> Any:
    cut = replies.cut_strings(thread, room)
    if cut is not None:
        return cut
    return {"thread_id": thread.get("thread_id"), "omitted": f"too large ({replies.SETTING})"}


def register(face: Face) -> None:
    server = face.server
    tool = face.tool
    budget = replies.text_budget(face.settings.max_reply_bytes)

    async def user(ctx: Context[Any, Any]) -> Any:
        caller = await face.caller(ctx)
        if caller.role not in ("admin", "user"):
            raise ToolError("403: only user and admin keys can act as a user of the swarm")
        return caller

    async def post(ctx: Context[Any, Any], body: dict[str, Any]) -> dict[str, Any]:
        return await post_as(await user(ctx), body)

    async def resume(ctx: Context[Any, Any], task_id: str, resume_from: str, **kwargs: Any) -> str:
        """Continue a paused task (what POST /message with `resume_from` does)."""
        body = {"task_id": task_id, "resume_from": resume_from, "kwargs": kwargs}
        return _json(await post(ctx, body))

    async def post_as(caller: Any, body: dict[str, Any]) -> dict[str, Any]:
        try:
            req = parse_message_request(body)
            return await messaging.post_message(face.state, caller, req)
        except Exception as exc:  # HTTPException: the status and detail HTTP would send
            raise tool_error(exc) from None

    @tool(
        description=(
            "Send the swarm a message as its user: starts a task, or continues one when "
            "task_id names it. With wait=true (default) returns the swarm's final answer "
            '{"response", "task_id"} (at most timeout_seconds). An answer whose subject is a '
            "breakpoint or an action review means the task paused: see get_task, then "
            "answer_breakpoint or review_actions. With wait=false returns the task_id at once."
        )
    )
    async def post_message(
        ctx: Context[Any, Any],
        body: str,
        task_id: str | None = None,
        subject: str | None = None,
        entrypoint: str | None = None,
        wait: bool = True,
        timeout_seconds: float | None = None,
    ) -> str:
        request: dict[str, Any] = {"body": body, "task_id": task_id or str(uuid.uuid4())}
        if subject:
            request["subject"] = subject
        if entrypoint:
            request["entrypoint"] = entrypoint
        limit = face.settings.max_wait_seconds
        request["kwargs"] = {"timeout": face.clamp_wait(timeout_seconds, limit) or limit}
        if wait:
            return _json(await post(ctx, request))
        # "started" only once the task's submission is committed; a refusal is this call's error.
        try:
            started = await messaging.start_message(
                face.state, await user(ctx), parse_message_request(request)
            )
        except ToolError:
            raise
        except Exception as exc:  # HTTPException: the status and detail HTTP would send
            raise tool_error(exc) from None
        started.add_done_callback(_finished_in_background)
        hold(face.background, started)
        return _json({"task_id": request["task_id"], "status": "started"})

    @tool(
        description=(
            "A task of yours: whether it is running or paused, its final response and its "
            "events (messages, tool calls, breakpoints, reviews), oldest first from "
            "`first_event` (0 by default) as many as fit in one answer; `next_event` is the "
            "first_event of the next page, null when none is left."
        )
    )
    async def get_task(ctx: Context[Any, Any], task_id: str, first_event: int = 0) -> str:
        caller = await user(ctx)
        try:
            record = await task_reads.get_task(face.state, caller, task_id)
        except Exception as exc:
            raise tool_error(exc) from None
        if isinstance(first_event, bool) or first_event < 0:
            raise ToolError("first_event must be 0 or more")
        events = list(record.pop("events", None) or [])[first_event:]
        shell = {**record, "first_event": first_event, "next_event": replies.WIDEST_COUNT}
        shell = replies.cut_strings(shell, budget // 4) or shell  # room for the events
        answer, count = replies.pack(shell, "events", events, budget, _cut_event)
        left = len(events) - count
        answer["next_event"] = first_event + count if left else None
        return replies.dumps(answer)

    @tool(
        description=(
            "Resume a task paused at a breakpoint tool: `result` is what the paused tool call "
            "returns to the agent (text, or a JSON list of {call_id, content}). Waits for the "
            "task's next answer like post_message."
        )
    )
    async def answer_breakpoint(
        ctx: Context[Any, Any], task_id: str, result: str | list[dict[str, Any]]
    ) -> str:
        return await resume(
            ctx, task_id, "breakpoint_tool_call", breakpoint_tool_call_result=result
        )

    @tool(
        description=(
            "Decide the actions a task holds for review: `decisions` is a list of "
            '{"tool_call_id", "type": accept|edit|ignore|respond, "args"?, "message"?}. '
            "Waits for the task's next answer like post_message."
        )
    )
    async def review_actions(
        ctx: Context[Any, Any], task_id: str, decisions: list[dict[str, Any]]
    ) -> str:
        return await resume(ctx, task_id, "action_review", decisions=decisions)

    # ------------------------------------------------------------------ resources
    @server.resource(
        "mail://swarm/{part}{?first}",
        description=(
            "The swarm you talk to: part=description (its agents, links and actions), "
            "agents (names, and which joined from outside) or threads (your instance's, "
            "oldest first from `first` (default 0), as many as fit in one answer; `next` is "
            "the `first` of the next page, null when none is left: "
            "mail://swarm/threads?first=N)."
        ),
        mime_type="application/json",
    )
    async def swarm_part(part: str, ctx: Context[Any, Any], first: str = "0") -> str:
        try:
            caller = await face.caller(ctx)
        except Exception as exc:
            raise resource_error(exc) from None
        state = face.state
        inst = await face.instance(caller)
        if part == "threads":
            found = await team.list_threads(state.instances.team_store, state.swarm_name, caller)
            return threads_page(found["threads"], first, budget)
        info = describe_swarm(inst.swarm, name=state.swarm_name)
        if part == "agents":
            return _json(
                [
                    {
                        "name": a["name"],
                        "external": bool(a.get("external")),
                        "description": a.get("description", ""),
                    }
                    for a in info["agents"]
                ]
            )
        if part == "description":
            return _json(info)
        raise resource_error(
            ValueError(f"unknown part '{part}'; use description, agents or threads")
        )

    @server.resource(
        "mail://tasks/{task_id}/events",
        description="The events of one of your tasks, oldest first.",
        mime_type="application/json",
    )
    async def task_events(task_id: str, ctx: Context[Any, Any]) -> str:
        try:
            caller = await face.caller(ctx)
            record = await task_reads.get_task(face.state, caller, task_id)
        except Exception as exc:
            raise resource_error(exc) from None
        return _json(record.get("events", []))
