"""Request handlers shared by every front door: the semantics behind the routes.

A route module parses, authorizes, calls one of these and shapes the response. Adapters that
answer the same requests another way (``cluster/``'s front end, which keeps the deployment's
health and template in a shared actor) call these too, never another route.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import HTTPException, Request

from mail.server.bodies import parse_health_update, parse_load_swarm
from mail.server.errors import BadRequest
from mail.server.state import ServerState
from mail.server.storage_health import degraded_reason
from mail.version import PROTOCOL_VERSION

logger = logging.getLogger("mail.server")


def get_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.mail
    return state


def root_body(state: ServerState) -> dict[str, Any]:
    """``GET /``."""
    return {
        "name": "mail",
        # Both spellings: the docs use protocol_version, the OpenAPI file version.
        "protocol_version": PROTOCOL_VERSION,
        "version": PROTOCOL_VERSION,
        "swarm": state.swarm_info(),
        "status": "running",
        "uptime": state.uptime(),
    }


def health_body(state: ServerState) -> dict[str, str]:
    """``GET /health`` (and the answer of ``POST /health``).

    While writes are failing (a full disk, the database down) a healthy server says
    ``degraded`` and why (``reason``); a status an admin set is kept, with the reason.
    """
    body = {
        "status": state.health_status,
        "swarm_name": state.public_swarm_name(),
        "timestamp": state.health_timestamp,
    }
    reason = degraded_reason(state)
    if reason is not None:
        if body["status"] == "healthy":
            body["status"] = "degraded"
        body["reason"] = reason
    return body


def registry_or_503(state: ServerState) -> Any:
    registry = state.get_registry()
    if registry is None:
        raise HTTPException(503, "swarm registry not available")
    return registry


def set_health(state: ServerState, data: dict[str, Any], admin_id: str) -> dict[str, str]:
    """``POST /health``: an admin sets the status ``GET /health`` reports."""
    status = parse_health_update(data)
    state.set_health(status)
    logger.info("health set to '%s' by admin %s", status, admin_id)
    return health_body(state)


def load_swarm(
    state: ServerState, data: dict[str, Any], admin_id: str
) -> tuple[dict[str, str], str]:
    """``POST /swarms/load``: the answer, and the swarms.json text that was loaded."""
    text = parse_load_swarm(data)
    from mail.api import MAILSwarmTemplate

    try:
        template = MAILSwarmTemplate.from_swarm_json(text)
    except Exception as exc:
        # A bad document is the caller's error, not ours: 400 (the original answered 500).
        raise BadRequest(f"error loading swarm from JSON: {exc}") from exc
    state.replace_template(template)
    logger.info(
        "admin %s loaded swarm '%s' (entrypoint %s)",
        admin_id,
        template.name,
        state.default_entrypoint,
    )
    return {"status": "success", "swarm_name": template.name}, text
