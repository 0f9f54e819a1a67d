"""Routes that need no credentials: ``GET /``, ``GET /health``, ``GET /swarms``."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from mail.server.jsonio import JSONBody
from mail.server.state import ServerState
from mail.version import PROTOCOL_VERSION

router = APIRouter()


def get_state(request: Request) -> ServerState:
    return request.app.state.mail


def health_body(state: ServerState) -> dict[str, str]:
    return {
        "status": state.health_status,
        "swarm_name": state.public_swarm_name(),
        "timestamp": state.health_timestamp,
    }


@router.get("/")
async def root(request: Request) -> JSONBody:
    state = get_state(request)
    return JSONBody(
        {
            "name": "mail",
            # Both spellings: the docs use protocol_version, the OpenAPI file version.
            "protocol_version": PROTOCOL_VERSION,
            "version": PROTOCOL_VERSION,
            "swarm": state.swarm_info(),
            "status": "running",
            "uptime": state.uptime(),
        }
    )


@router.get("/health")
async def health(request: Request) -> JSONBody:
    return JSONBody(health_body(get_state(request)))


@router.get("/swarms")
async def list_swarms(request: Request) -> JSONBody:
    registry = get_state(request).get_registry()
    if registry is None:
        raise HTTPException(503, "swarm registry not available")
    return JSONBody({"swarms": registry.get_public_endpoints_cleaned()})
