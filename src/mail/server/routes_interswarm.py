"""Interswarm routes: /interswarm/forward and /back (remote swarms, role agent) and
/interswarm/message (admin/user). Parsing and authorization only; see server/interswarm.py."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from mail.server import interswarm
from mail.server.auth import Caller, caller_admin_or_user, caller_agent
from mail.server.bodies import read_json_object
from mail.server.handlers import get_state
from mail.server.idempotency import current_ticket, idempotent
from mail.server.jsonio import JSONBody

router = APIRouter()


@router.post("/interswarm/forward")
@router.post("/interswarm/back")
@idempotent()
async def interswarm_receive(request: Request, caller: Caller = Depends(caller_agent)) -> JSONBody:
    state = get_state(request)
    envelope = interswarm.validate_envelope(await read_json_object(request), state.config.settings)
    direction = request.scope["route"].path.rpartition("/")[2]  # forward or back
    return JSONBody(await interswarm.receive(state, caller, envelope, direction))


# Runs a whole task and waits for its answer: the key is taken with the task id before the
# task gets the message, and a repeat is answered from that task (409 while it runs, then its
# answer), never by a second task, even after a kill -9 and `idempotency_takeover_after`.
@router.post("/interswarm/message")
@idempotent(interswarm.resolve_user_message, deferred=True)
async def interswarm_message(
    request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    data = await read_json_object(request)
    state, ticket = get_state(request), current_ticket(request)
    return JSONBody(await interswarm.post_user_message(state, caller, data, ticket))
