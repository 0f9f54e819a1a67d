"""``/webhooks``: a caller's push subscriptions and their delivery log (docs/webhooks.md); and
``/crons``: a caller's scheduled tasks (docs/crons.md)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.responses import Response

from mail.server import webhooks
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.bodies import read_json_object
from mail.server.crons import CronScheduler
from mail.server.handlers import get_state
from mail.server.idempotency import current_ticket, idempotent
from mail.server.jsonio import JSONBody
from mail.server.webhooks import owner_of
from mail.webhooks.signing import new_secret

router = APIRouter()


@router.get("/webhooks/event-types")
async def event_types(_caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    return JSONBody(webhooks.event_types())


@router.get("/webhooks")
async def list_webhooks(
    request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    return JSONBody(await webhooks.list_webhooks(get_state(request), caller))


@router.post("/webhooks")
@idempotent(names_work="wh")  # the id, chosen with the key: a takeover finds its subscription
async def create_webhook(
    request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    body = await read_json_object(request)
    ticket = current_ticket(request)
    hook_id = ticket.context.get("work") if ticket is not None and ticket.taken else None
    takeover = ticket is not None and ticket.takeover
    made = await webhooks.create(get_state(request), caller, body, hook_id, takeover=takeover)
    return JSONBody(made, status_code=201)


@router.get("/webhooks/{webhook_id}")
async def get_webhook(
    webhook_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    return JSONBody(await webhooks.get(get_state(request), caller, webhook_id))


@router.patch("/webhooks/{webhook_id}")
@idempotent()
async def update_webhook(
    webhook_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    body = await read_json_object(request)
    return JSONBody(await webhooks.update(get_state(request), caller, webhook_id, body))


@router.delete("/webhooks/{webhook_id}")
@idempotent()  # a retried removal gets its first answer, not a 404
async def delete_webhook(
    webhook_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> Response:
    ticket = current_ticket(request)
    takeover = ticket is not None and ticket.takeover
    await webhooks.delete(get_state(request), caller, webhook_id, takeover=takeover)
    return Response(status_code=204)


@router.post("/webhooks/{webhook_id}/rotate-secret")
@idempotent(names_work=new_secret)  # the new secret, chosen with the key: never rotated twice
async def rotate_secret(
    webhook_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    body = await read_json_object(request, required=False)
    ticket = current_ticket(request)
    secret = ticket.context.get("work") if ticket is not None and ticket.taken else None
    takeover = ticket is not None and ticket.takeover
    state = get_state(request)
    return JSONBody(
        await webhooks.rotate(state, caller, webhook_id, body, secret, takeover=takeover)
    )


@router.post("/webhooks/{webhook_id}/test")
@idempotent()
async def test_webhook(
    webhook_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    return JSONBody(await webhooks.test(get_state(request), caller, webhook_id), status_code=202)


@router.get("/webhooks/{webhook_id}/deliveries")
async def list_deliveries(
    webhook_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    body, following = await webhooks.deliveries(
        get_state(request), caller, webhook_id, request.query_params
    )
    response = JSONBody(body)
    if following is not None:
        response.headers["X-Next-Cursor"] = following
    return response


@router.post("/webhooks/{webhook_id}/deliveries/{delivery_id}/retry")
@idempotent()
async def retry_delivery(
    webhook_id: str,
    delivery_id: str,
    request: Request,
    caller: Caller = Depends(caller_admin_or_user),
) -> JSONBody:
    found = await webhooks.retry(get_state(request), caller, webhook_id, delivery_id)
    return JSONBody(found, status_code=202)


def scheduler_of(request: Request) -> CronScheduler:
    scheduler = getattr(get_state(request), "crons", None)
    if scheduler is None:
        raise HTTPException(404, "scheduled tasks are off on this server ([server.crons] enabled)")
    return scheduler  # type: ignore[no-any-return]


@router.get("/crons")
async def list_crons(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    return JSONBody({"crons": await scheduler_of(request).list_for(owner_of(caller))})


@router.post("/crons")
@idempotent()
async def create_cron(request: Request, caller: Caller = Depends(caller_admin_or_user)) -> JSONBody:
    body = await read_json_object(request)
    return JSONBody(
        await scheduler_of(request).create(owner_of(caller), caller.api_key, body),
        status_code=201,
    )


@router.get("/crons/{cron_id}")
async def get_cron(
    cron_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    return JSONBody(await scheduler_of(request).get(owner_of(caller), cron_id))


@router.patch("/crons/{cron_id}")
@idempotent()
async def update_cron(
    cron_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> JSONBody:
    body = await read_json_object(request)
    return JSONBody(
        await scheduler_of(request).update(owner_of(caller), caller.api_key, cron_id, body)
    )


@router.delete("/crons/{cron_id}")
@idempotent()
async def delete_cron(
    cron_id: str, request: Request, caller: Caller = Depends(caller_admin_or_user)
) -> Response:
    await scheduler_of(request).delete(owner_of(caller), cron_id)
    return Response(status_code=204)
