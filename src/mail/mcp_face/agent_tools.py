"""MCP tools for an outside agent that joined the swarm (priority: be a member)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from mail.core.message import create_agent_address, make_message, make_request
from mail.core.tools import AgentToolCall
from mail.mcp_face import inbox_tools, replies
from mail.mcp_face.face import Face, tool_error
from mail.mcp_face.members import FaceError, Member
from mail.server.messaging import Admission, admit_incoming, check_stored

REPLY_FILED_SECONDS = 5.0
# The tools whose message goes into the runtime's mailbox for its task (a new task is made
# only when the runtime takes it from there).
MAILBOX_SENDS = frozenset({"send_request", "send_response", "send_broadcast"})
# The tools whose text is stored as team data (posts, inbox entries), checked as uploads.
TEAM_WRITES = frozenset({"create_thread", "post_to_thread"})

# What to do instead of sending to a completed task, per tool that sends (the runtime drops
# an agent's message to a completed task).
INSTEAD = {
    "send_request": "leave out task_id to start a new task",
    "send_broadcast": "leave out task_id to send it in a task that is still running",
    "transfer_file": "leave out task_id to send it in a task that is still running",
    "send_response": (
        "nobody can be waiting for an answer in it any more; to tell the agent anyway, "
        "send_request starts a new task"
    ),
}


def refuse_if_completed(member: Member, tool: str, task_id: str) -> None:
    """FaceError when `task_id` is completed: what `tool` sends to it would be dropped."""
    if member.task_completed(task_id):
        raise FaceError(
            f"not sent: task '{task_id}' is completed, and messages to it would be dropped; "
            + INSTEAD[tool]
        )


def _tool_call(tool: str, args: dict[str, Any]) -> AgentToolCall:
    call_id = f"mcp_{uuid.uuid4().hex[:12]}"
    completion = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": tool}}],
    }
    return AgentToolCall(
        tool_name=tool, tool_args=args, tool_call_id=call_id, completion=completion
    )


async def run_tool(
    member: Member, tool: str, args: dict[str, Any], task_id: str, max_subject: int
) -> str:
    """The tool result text; FaceError when the handler answered ``ERROR: ...``."""
    import mail.core.team.handlers  # noqa: F401 - registers the team tool handlers
    from mail.core.runtime_turns import TurnContext
    from mail.core.tool_handlers import TOOL_HANDLERS

    rt = member.runtime
    if not member.active:
        raise FaceError("you are no longer a member of the swarm; call join_swarm again")
    subject = args.get("subject")
    if isinstance(subject, str) and len(subject) > max_subject:
        raise FaceError(
            f"not sent: the subject is {len(subject)} characters; the limit is {max_subject} "
            "([server.mcp] max_subject_chars)"
        )
    if tool in INSTEAD:
        refuse_if_completed(member, tool, task_id)
    call = _tool_call(tool, args)
    oversized = rt.turns.oversized_text(call)
    if oversized is not None:
        raise FaceError(f"not sent: {oversized}")
    origin = make_message(
        make_request(
            task_id, create_agent_address(member.name), create_agent_address(member.name), "", ""
        ),
        "request",
    )
    ctx = TurnContext(task_id, member.name, origin, [])
    result = await TOOL_HANDLERS[tool](rt, ctx, call)
    text = str(result or "SUCCESS")
    if text.startswith("ERROR"):
        raise FaceError(text.removeprefix("ERROR:").strip())
    return text.removeprefix("SUCCESS:").strip()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def register(face: Face) -> None:  # noqa: C901 - one closure per tool, each short
    tool = face.tool
    budget = replies.text_budget(face.settings.max_reply_bytes)

    async def act(
        ctx: Context[Any, Any],
        name: str,
        args: dict[str, Any],
        task_id: str | None = None,
        incoming: int = -1,
    ) -> str:
        """Run tool `name` in `task_id` (default: the caller's current task); one that sends
        (`incoming` >= 0: the bytes it sends) is under the caller's storage quotas: as a new
        task when it would start one, and a thread post (stored team data) as an upload,
        whatever its task."""
        member = face.member(ctx)
        task_id = task_id or member.default_task()
        admitted = None
        if name in TEAM_WRITES and incoming >= 0:
            await check_team_bytes(face.state, member, task_id, incoming)
        elif incoming >= 0:
            admitted = await check_new_task(face.state, member, task_id, incoming)
        try:
            result = await run_tool(member, name, args, task_id, face.settings.max_subject_chars)
        except FaceError as exc:
            raise ToolError(str(exc)) from None
        finally:
            if admitted is not None:  # (no await to `_ensure_task` below: no gap uncounted)
                admitted.release()
        if incoming >= 0:
            # Acknowledged means stored: the message and the task it starts are committed first.
            if name in MAILBOX_SENDS:
                member.runtime._ensure_task(task_id)
            await member.inst.swarm.flush_before_answer()
        return result

    @tool(
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

    @tool(description="Leave the swarm: you are no longer listed or addressable.")
    async def leave_swarm(ctx: Context[Any, Any]) -> str:
        return _json({"left": face.leave(ctx)})

    @tool(
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
        if not wait_for_reply:
            return _json(
                {"task_id": task, "result": await act(ctx, "send_request", args, task, len(body))}
            )
        args["wait_for_reply"] = True
        args["timeout_seconds"] = face.clamp_wait(
            timeout_seconds, face.state.config.team_tools.reply_timeout
        )
        member = face.member(ctx)
        # The reply handed over is filed in the inbox as kind "reply" (a moment after it is
        # handed over); any other unread message from the target stays unread.
        sender = target.strip()
        earlier = await member.unread(sender=sender, task_id=task, kind="reply")
        result = await act(ctx, "send_request", args, task, len(body))
        filed = await member.arrived(
            REPLY_FILED_SECONDS,
            sender=sender,
            task_id=task,
            kind="reply",
            skip=frozenset(e["entry_id"] for e in earlier),
        )
        reply = filed[:1]
        await member.mark_read(reply)  # it is this call's result
        answer = {"task_id": task, "result": result}
        if replies.wire_bytes(_json(answer)) <= budget or not reply:
            return _json(answer)  # (an answer still too large is cut by ReplyCap)
        cut = replies.cut_message(inbox_tools.public(reply[0]), budget - 512)
        note = f"reply from {target.strip()}, too long for one answer: see `reply`"
        return _json({"task_id": task, "result": note, "reply": cut})

    @tool(
        description=(
            "Answer a request an agent sent you: `target` is the agent that asked, `task_id` "
            "the task of its request (from get_messages; defaults to the task of the newest "
            "message you received, and is refused when that task is completed). If that agent "
            "is waiting for your reply it gets it at once."
        )
    )
    async def send_response(
        ctx: Context[Any, Any], target: str, subject: str, body: str, task_id: str | None = None
    ) -> str:
        member = face.member(ctx)
        # An answer goes to its request's task: never to a fresh one.
        task = task_id or member.last_task or member.home_task
        if not task_id and member.task_completed(task):
            which = "the newest message you received" if member.last_task else "your messages"
            raise ToolError(
                f"not sent: the task of {which} ('{task}') is completed; pass the task_id of "
                "the request you are answering (get_messages lists each message's task_id)"
            )
        args = {"target": target, "subject": subject, "body": body}
        return _json(
            {"task_id": task, "result": await act(ctx, "send_response", args, task, len(body))}
        )

    @tool(
        description=(
            "Send one message to several agents of the swarm: `targets` is a list of names, "
            'or ["all"] for everyone. You never receive your own broadcast. Without '
            "`task_id` it goes to the task of the newest message you received, or to a new "
            "task once that one is completed."
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
        task = task_id or member.default_task()
        args = {"subject": subject, "body": body, "targets": targets or ["all"]}
        return _json(
            {"task_id": task, "result": await act(ctx, "send_broadcast", args, task, len(body))}
        )

    @tool(
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
        args = {"title": title, "participants": participants, "initial_message": initial_message}
        return await act(ctx, "create_thread", args, incoming=len(initial_message or ""))

    @tool(
        description=(
            "Post to a thread you take part in. urgent=true also wakes every participant "
            "at once (an interrupt); a normal post waits for their next turn."
        )
    )
    async def post_to_thread(
        ctx: Context[Any, Any], thread_id: str, body: str, urgent: bool = False
    ) -> str:
        args = {"thread_id": thread_id, "body": body, "urgent": urgent}
        return await act(ctx, "post_to_thread", args, incoming=len(body))

    @tool(description="Join an existing thread by its thread_id.")
    async def join_thread(ctx: Context[Any, Any], thread_id: str) -> str:
        return await act(ctx, "join_thread", {"thread_id": thread_id})

    @tool(description="A thread's title, creator, participants and its last 20 posts.")
    async def get_thread_details(ctx: Context[Any, Any], thread_id: str) -> str:
        return await act(ctx, "get_thread_details", {"thread_id": thread_id})

    @tool(
        description=(
            "Add `agent` to a thread you take part in, or remove one (remove=true; the "
            "creator can remove anyone, others only themselves)."
        )
    )
    async def change_thread_participant(
        ctx: Context[Any, Any], thread_id: str, agent: str, remove: bool = False
    ) -> str:
        tool = "remove_participant_from_thread" if remove else "add_participant_to_thread"
        return await act(ctx, tool, {"thread_id": thread_id, "agent": agent})

    @tool(
        description=(
            "Send a file to an agent of the swarm (or 'user'): give its text as `content` or "
            "its bytes as `content_base64`. The recipient gets a message naming the "
            "attachment id, which it reads with read_attachment. Without `task_id` it goes "
            "to the task of the newest message you received, or to a new task once that one "
            "is completed."
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
        cap = member.team.settings.max_attachment_bytes
        data = _file_bytes(content, content_base64, cap)
        task = task_id or member.default_task()
        if not files.is_user_recipient(member.team, str(recipient or "").strip()):
            try:
                refuse_if_completed(member, "transfer_file", task)
            except FaceError as exc:
                raise ToolError(str(exc)) from None
        await check_team_bytes(face.state, member, task, len(data))
        try:
            name = files.clean_filename(filename, "file")
            record, target = await files.send_bytes(
                member.team, member.name, task, recipient, data, name, description
            )
        except TeamError as exc:
            raise ToolError(str(exc)) from None
        return _json({"task_id": task, "sent_to": target, **files.attachment_meta(record)})

    @tool(
        description=(
            "The text of an attachment sent to you (or by you), by its id. Binary files and "
            "files over [server.team_tools] max_read_bytes are refused."
        )
    )
    async def read_attachment(ctx: Context[Any, Any], attachment_id: str) -> str:
        return await act(ctx, "read_attachment", {"attachment_id": attachment_id})


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


# The caller's storage quotas for what an outside agent sends ([server.store]
# max_stored_tasks_per_caller, max_stored_bytes_per_caller; docs/database.md).
async def check_new_task(
    state: Any, member: Member, task_id: str, incoming: int
) -> Admission | None:
    """ToolError (``429: ...`` naming the setting, or 503 while the task store is backed
    up) when what the member sends (`incoming` characters) would start a task past the
    caller's bounds; nothing for a task its instance holds (running, paused, or finished: a
    send to a finished one is refused anyway). Otherwise the admission, to release once the
    message is in the instance (or never will be)."""
    rt = member.runtime
    if task_id in rt.mail_tasks or task_id in rt.forgotten_tasks:
        return None
    try:
        return await admit_incoming(state, member.inst, task_id, incoming)
    except Exception as exc:  # HTTPException 429/503: the detail names the setting
        raise tool_error(exc) from None


async def check_team_bytes(state: Any, member: Member, task_id: str, size: int) -> None:
    """ToolError (``429: ...`` naming the setting) when a team write of `size` bytes (a file,
    a post) would pass the caller's byte bound, as an upload would; the team tool books
    what it then stores (`mail.core.stored_bytes`)."""
    finished = state.finished
    if finished is None:
        return
    inst, rt = member.inst, member.runtime
    books = await finished.books(inst.kind, inst.id)
    task = rt.mail_tasks.get(task_id)
    paused = (
        task is not None
        and not task.is_running
        and bool(task.pending_reviews or rt.pending_breakpoints(task_id))
    )
    if not paused:  # what goes to a paused task is part of closing its pause: never refused
        new_task = task is None and task_id not in rt.forgotten_tasks
        try:
            check_stored(state.quota, books, new_task, size, rt.open_tasks.ids)
        except Exception as exc:  # HTTPException 429: the detail names the setting
            raise tool_error(exc) from None
