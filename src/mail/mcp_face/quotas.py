"""The caller's storage quotas for what an outside agent sends ([server.store]
max_stored_tasks_per_caller, max_stored_bytes_per_caller; docs/database.md)."""

from __future__ import annotations

from typing import Any

from mail.mcp_face.face import tool_error
from mail.mcp_face.members import Member
from mail.server.admission import Admission, admit_incoming, check_stored


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
