"""Routes that need no credentials: ``GET /``, ``GET /health``, ``GET /swarms``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.background import BackgroundTask

from mail.server.handlers import get_state, health_body, registry_or_503, root_body
from mail.server.jsonio import JSONBody

router = APIRouter()


@router.get("/")
async def root(request: Request) -> JSONBody:
    return JSONBody(root_body(get_state(request)))


@router.get("/health")
async def health(request: Request) -> JSONBody:
    state = get_state(request)
    warm_up = state.warm_up
    if warm_up is not None and not warm_up.started:
        # What start-up deferred loads once this answer has gone out (server/warmup.py).
        return JSONBody(health_body(state), background=BackgroundTask(warm_up.start))
    return JSONBody(health_body(state))


@router.get("/swarms")
async def list_swarms(request: Request) -> JSONBody:
    registry = registry_or_503(get_state(request))
    return JSONBody({"swarms": registry.get_public_endpoints_cleaned()})


__all__ = ["get_state", "health_body", "router"]  # the handlers, where callers found them
