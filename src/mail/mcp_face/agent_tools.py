"""MCP tools for an outside agent that joined the swarm (priority: be a member)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from mail.mcp_face.acting import run_tool
from mail.mcp_face.face import Face
from mail.mcp_face.members import FaceError, Member


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("entry_id", "kind", "thread_id", "sender", "subject", "body", "task_id", "timestamp")
    out = {k: entry.get(k) for k in keep}
    if entry.get("attachments"):
        out["attachments"] = entry["attachments"]
    return out


def register(face: Face) -> None:  # noqa: C901 - one closure per tool, each short
    server = face.server

    async def act(ctx: Context[Any, Any], tool: str, args: dict[str, Any], task_id: str) -> str:
        member = face.member(ctx)
        assert member is not None
        try:
            return await run_tool(member, tool, args, task_id, face.settings.max_subject_chars)
        except FaceError as exc:
            raise ToolError(str(exc)) from None

    async def wait(member: Member, timeout: float, **filters: Any) -> list[dict[str, Any]]:
        try:
            return await member.wait_unread(timeout, **filters)
        except FaceError as exc:
            raise ToolError(str(exc)) from None

    def task_for(member: Member, task_id: str | None) -> str:
        if task_id:
            return task_id
        return member.last_task or member.home_task

    @server.tool(
        description=(
            "Join this MAIL swarm as an agent named `name` (letters, digits, '_', '-', '.'; "
            "must not be taken). `description` tells the swarm's agents what you do. After "
            "joining you are listed in the swarm, its agents can address you by name, and "
            "their messages wait in your inbox. You leave when this session ends or when you "
            "call leave_swarm. If an earlier session of yours still holds the name (it "
            "crashed), replace=true takes it over. Returns the agents you can talk to."
        )
    )
    async def join_swarm(
        ctx: Context[Any, Any], name: str = "", description: str = "", replace: bool = False
    ) -> str:
        member = await face.join(ctx, name, description, replace)
        agents = [n for n in member.runtime.agents if n != member.name]
        return _json({"joined_as": member.name, "swarm": face.state.swarm_name, "agents": agents})

    @server.tool(description="Leave the swarm: you are no longer listed or addressable.")
    async def leave_swarm(ctx: Context[Any, Any]) -> str:
        return _json({"left": face.leave(ctx)})

    @server.tool(
        description=(
            "Send a request to an agent of the swarm (`target` is its name) asking for "
            "information or handing it work. Without `task_id` a new task starts; pass the "
            "task_id of a message you received to continue that task. With "
            "wait_for_reply=true the agent's send_response to you is returned by this call "
            "(up to timeout_seconds); otherwise its answer arrives in your inbox."
        )
    )
    async def send_request(
        ctx: Context[Any, Any],
        target: str,
        subject: str,
        body: str,
        task_id: str | None = None,
        wait_for_reply: bool = False,
        timeout_seconds: float | None = None,
    ) -> str:
        task = task_id or str(uuid.uuid4())
        args: dict[str, Any] = {"target": target, "subject": subject, "body": body}
        if wait_for_reply:
            args["wait_for_reply"] = True
            args["timeout_seconds"] = face.clamp_wait(
                timeout_seconds, face.state.config.team_tools.reply_timeout
            )
        result = await act(ctx, "send_request", args, task)
        if wait_for_reply:  # the reply is this result: it is not left unread in the inbox
            member = face.member(ctx)
            assert member is not None
            await member.wait_unread(0, sender=target.strip(), task_id=task)
        return _json({"task_id": task, "result": result})

    @server.tool(
        description=(
            "Answer a request an agent sent you: `target` is the agent that asked, `task_id` "
            "the task of its request (from get_messages; defaults to the task of the newest "
            "message you received). If that agent is waiting for your reply it gets it at once."
        )
    )
    async def send_response(
        ctx: Context[Any, Any], target: str, subject: str, body: str, task_id: str | None = None
    ) -> str:
        member = face.member(ctx)
        assert member is not None
        task = task_for(member, task_id)
        args = {"target": target, "subject": subject, "body": body}
        return _json({"task_id": task, "result": await act(ctx, "send_response", args, task)})

    @server.tool(
        description=(
            "Send one message to several agents of the swarm: `targets` is a list of names, "
            'or ["all"] for everyone. You never receive your own broadcast.'
        )
    )
    async def send_broadcast(
        ctx: Context[Any, Any],
        subject: str,
        body: str,
        targets: list[str] | None = None,
        task_id: str | None = None,
    ) -> str:
        member = face.member(ctx)
        assert member is not None
        task = task_for(member, task_id)
        args = {"subject": subject, "body": body, "targets": targets or ["all"]}
        return _json({"task_id": task, "result": await act(ctx, "send_broadcast", args, task)})

    @server.tool(
        description=(
            "Wait up to timeout_seconds for a message from agent `sender` (optionally on one "
            "task) that you have not read yet, and return it (marked read). Use after "
            "send_request without wait_for_reply. Returns an empty list on timeout."
        )
    )
    async def wait_for_reply(
        ctx: Context[Any, Any],
        sender: str,
        task_id: str | None = None,
        timeout_seconds: float | None = None,
    ) -> str:
        member = face.member(ctx)
        assert member is not None
        timeout = face.clamp_wait(timeout_seconds, face.state.config.team_tools.reply_timeout)
        found = await wait(member, timeout, sender=sender, task_id=task_id)
        return _json({"messages": [_public(e) for e in found], "timed_out": not found})

    @server.tool(
        description=(
            "Block until at least one unread message is in your inbox, at most "
            "timeout_seconds (0 checks and returns at once), then return the unread messages "
            "(oldest first, marked read). Call it in a loop to serve the swarm's requests."
        )
    )
    async def wait_for_messages(ctx: Context[Any, Any], timeout_seconds: float = 30.0) -> str:
        member = face.member(ctx)
        assert member is not None
        found = await wait(member, face.clamp_wait(timeout_seconds, 30.0))
        found.reverse()
        return _json({"messages": [_public(e) for e in found], "timed_out": not found})

    @server.tool(
        description=(
            "Read your inbox, newest first (default 10, at most 100), optionally only one "
            "thread or entries since an ISO 8601 time. Returned entries are marked read."
        )
    )
    async def get_messages(
        ctx: Context[Any, Any],
        limit: int = 10,
        thread_id: str | None = None,
        since: str | None = None,
    ) -> str:
        member = face.member(ctx)
        assert member is not None
        args = {"limit": limit, "thread_id": thread_id, "since": since}
        return await act(ctx, "get_messages", args, member.home_task)

    @server.tool(description='How many unread messages you have: {"unread", "direct", "threads"}.')
    async def check_new_messages(ctx: Context[Any, Any]) -> str:
        member = face.member(ctx)
        assert member is not None
        return await act(ctx, "check_new_messages", {}, member.home_task)

    @server.tool(
        description=(
            "Open a named group conversation (thread) with agents of the swarm; you are its "
            "creator. Thread posts reach every participant's inbox. Returns the thread_id."
        )
    )
    async def create_thread(
        ctx: Context[Any, Any],
        title: str,
        participants: list[str],
        initial_message: str | None = None,
    ) -> str:
        member = face.member(ctx)
        assert member is not None
        args = {"title": title, "participants": participants, "initial_message": initial_message}
        return await act(ctx, "create_thread", args, task_for(member, None))

    @server.tool(
        description=(
            "Post to a thread you take part in. urgent=true also wakes every participant "
            "at once (an interrupt); a normal post waits for their next turn."
        )
    )
    async def post_to_thread(
        ctx: Context[Any, Any], thread_id: str, body: str, urgent: bool = False
    ) -> str:
        member = face.member(ctx)
        assert member is not None
        args = {"thread_id": thread_id, "body": body, "urgent": urgent}
        return await act(ctx, "post_to_thread", args, task_for(member, None))

    @server.tool(description="Join an existing thread by its thread_id.")
    async def join_thread(ctx: Context[Any, Any], thread_id: str) -> str:
        member = face.member(ctx)
        assert member is not None
        return await act(ctx, "join_thread", {"thread_id": thread_id}, task_for(member, None))

    @server.tool(description="A thread's title, creator, participants and its last 20 posts.")
    async def get_thread_details(ctx: Context[Any, Any], thread_id: str) -> str:
        member = face.member(ctx)
        assert member is not None
        args = {"thread_id": thread_id}
        return await act(ctx, "get_thread_details", args, task_for(member, None))

    @server.tool(
        description=(
            "Add `agent` to a thread you take part in, or remove one (remove=true; the "
            "creator can remove anyone, others only themselves)."
        )
    )
    async def change_thread_participant(
        ctx: Context[Any, Any], thread_id: str, agent: str, remove: bool = False
    ) -> str:
        member = face.member(ctx)
        assert member is not None
        tool = "remove_participant_from_thread" if remove else "add_participant_to_thread"
        args = {"thread_id": thread_id, "agent": agent}
        return await act(ctx, tool, args, task_for(member, None))

    @server.tool(
        description=(
            "Send a file to an agent of the swarm (or 'user'): give its text as `content` or "
            "its bytes as `content_base64`. The recipient gets a message naming the "
            "attachment id, which it reads with read_attachment."
        )
    )
    async def transfer_file(
        ctx: Context[Any, Any],
        recipient: str,
        filename: str,
        content: str | None = None,
        content_base64: str | None = None,
        description: str = "",
        task_id: str | None = None,
    ) -> str:
        from mail.core.team import files
        from mail.core.team.service import TeamError

        member = face.member(ctx)
        assert member is not None
        cap = member.team.settings.max_attachment_bytes
        data = _file_bytes(content, content_base64, cap)
        task = task_for(member, task_id)
        try:
            name = files.clean_filename(filename, "file")
            record, target = await files.send_bytes(
                member.team, member.name, task, recipient, data, name, description
            )
        except TeamError as exc:
            raise ToolError(str(exc)) from None
        return _json({"task_id": task, "sent_to": target, **files.attachment_meta(record)})

    @server.tool(
        description=(
            "The text of an attachment sent to you (or by you), by its id. Binary files and "
            "files over [server.team_tools] max_read_bytes are refused."
        )
    )
    async def read_attachment(ctx: Context[Any, Any], attachment_id: str) -> str:
        member = face.member(ctx)
        assert member is not None
        return await act(ctx, "read_attachment", {"attachment_id": attachment_id}, member.home_task)


def _file_bytes(content: str | None, content_base64: str | None, cap: int) -> bytes:
    if (content is None) == (content_base64 is None):
        raise ToolError("give exactly one of content, content_base64")
    if content_base64 is not None:
        if len(content_base64) * 3 // 4 > cap + 3:
            raise ToolError(
                f"the file is over {cap} bytes ([server.team_tools] max_attachment_bytes)"
            )
        try:
            return base64.b64decode(content_base64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolError(f"content_base64 is not base64: {exc}") from None
    assert content is not None
    return content.encode("utf-8")
