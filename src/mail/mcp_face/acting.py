"""Run a MAIL or team tool as an outside agent: the same handlers a model's call goes through."""

from __future__ import annotations

import uuid
from typing import Any

from mail.core.message import create_agent_address, make_message, make_request
from mail.core.tools import AgentToolCall
from mail.mcp_face.members import FaceError, Member

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
