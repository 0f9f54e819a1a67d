"""``/crons``: a caller's scheduled tasks (docs/crons.md)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from mail.server import crons
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.bodies import read_json_object
from mail.server.handlers import get_state
from mail.server.idempotency import idempotent
from mail.server.jsonio import JSONBody

router = APIRouter()


@router.get("/crons")
async def list_crons(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    return JSONBody(await crons.list_crons(get_state(request), caller))


@router.post("/crons")
@idempotent()
async def create_cron(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    body = await read_json_object(request)
    return JSONBody(await crons.create(get_state(request), caller, body), status_code=201)


@router.get("/crons/{cron_id}")
async def get_cron(
    cron_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    return JSONBody(await crons.get(get_state(request), caller, cron_id))


@router.patch("/crons/{cron_id}")
@idempotent()
async def update_cron(
    cron_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    body = await read_json_object(request)
    return JSONBody(await crons.update(get_state(request), caller, cron_id, body))


@router.delete("/crons/{cron_id}")
@idempotent()
async def delete_cron(
    cron_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> Response:
    await crons.delete(get_state(request), caller, cron_id)
    return Response(status_code=204)
