"""Team messaging routes: ``GET /threads``, ``GET /threads/{id}``, ``GET /attachments/{id}``."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from mail.server import team
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.handlers import get_state
from mail.server.jsonio import JSONBody

router = APIRouter()


@router.get("/threads")
async def list_threads(
    request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    state = get_state(request)
    return JSONBody(await team.list_threads(state.instances.team_store, state.swarm_name, caller))


@router.get("/threads/{thread_id}")
async def get_thread(
    thread_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    state = get_state(request)
    return JSONBody(
        await team.get_thread(state.instances.team_store, state.swarm_name, caller, thread_id)
    )


@router.get("/attachments/{attachment_id}")
async def get_attachment(
    attachment_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> Response:
    state = get_state(request)
    record, data = await team.get_attachment(
        state.instances.team_store, state.swarm_name, caller, attachment_id
    )
    filename = quote(record["filename"])
    return Response(
        content=data,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{filename}",
            "X-Content-SHA256": record["sha256"],
            "X-Attachment-Description": quote(record.get("description") or ""),
        },
    )
