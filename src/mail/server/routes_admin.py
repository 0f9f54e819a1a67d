"""Admin-only routes: health updates, swarm registration, template dump and load."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request

from mail.server import handlers
from mail.server.auth import Caller, caller_admin
from mail.server.bodies import parse_register_swarm, read_json_object
from mail.server.errors import BadRequest
from mail.server.handlers import get_state, registry_or_503
from mail.server.idempotency import idempotent
from mail.server.jsonio import JSONBody
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")

router = APIRouter()


@router.post("/health")
async def update_health(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    data = await read_json_object(request)
    return JSONBody(handlers.set_health(get_state(request), data, caller.id))


async def _register(request: Request, caller: Caller) -> JSONBody:
    state = get_state(request)
    req = parse_register_swarm(await read_json_object(request))
    registry = registry_or_503(state)
    try:
        await _while_connected(
            request,
            registry.register_swarm(
                req.name,
                req.base_url,
                auth_token=req.auth_token,
                metadata=req.metadata,
                volatile=req.volatile,
                caller_id=req.caller_id,
            ),
        )
    except ValueError as exc:
        raise BadRequest(f"error registering swarm: '{echo(exc, 300)}'") from exc
    except Exception as exc:
        # Typically the remote's GET / failed; the caller needs to know why.
        logger.warning("registering swarm '%s' at %s failed: %s", req.name, req.base_url, exc)
        raise HTTPException(500, f"error registering swarm: '{echo(exc, 300)}'") from exc
    logger.info(
        "admin %s registered swarm '%s' (%s)",
        caller.id,
        req.name,
        "volatile" if req.volatile else "persistent",
    )
    return JSONBody({"status": "registered", "swarm_name": req.name})


async def _while_connected(request: Request, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work``, stopped as soon as the client goes away: a registration reading a remote
    that answers slowly ends with the admin's request (the read has its own deadline too)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnect(request.receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        logger.info("registration stopped: the client went away")
        raise HTTPException(499, "the client went away")
    task.result()


async def _until_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


@router.post("/swarms")
@idempotent()
async def register_swarm(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    return await _register(request, caller)


@router.post("/swarms/register")
@idempotent()
async def register_swarm_alias(
    request: Request, caller: Caller = Depends(caller_admin)
) -> JSONBody:
    # The protocol specification names this route; the original server only had POST /swarms.
    return await _register(request, caller)


@router.get("/swarms/dump")
async def dump_swarm(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    state = get_state(request)
    if state.template is None:
        raise HTTPException(503, "no swarm loaded")
    info = state.swarm_info()
    logger.info(
        "swarm dump for admin %s: name=%s version=%s entrypoint=%s agents=%s source=%s",
        caller.id,
        info["name"],
        info["version"],
        info["entrypoint"],
        ", ".join(state.agent_names()),
        state.template_source,
    )
    return JSONBody(
        {"status": "dumped", "swarm_name": getattr(state.template, "name", state.swarm_name)}
    )


@router.post("/swarms/load")
@idempotent()
async def load_swarm(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    body, _ = handlers.load_swarm(get_state(request), await read_json_object(request), caller.id)
    return JSONBody(body)
