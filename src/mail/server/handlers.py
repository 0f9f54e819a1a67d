"""Request handlers shared by every front door: the semantics behind the routes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request

from mail.server.bodies import parse_health_update, parse_load_swarm
from mail.server.errors import BadRequest
from mail.server.state import ServerState
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


# -- whether the stores' writes land (/health, /status, /metrics, the console) ----------------
# A store retrying a write the database refused (a full disk, PostgreSQL down) is degraded:
# the server answers and loses nothing it acknowledged, but holds it only in memory meanwhile.
_SHOWN = {"tasks": "task store", "team": "team store", "memory": "agent memory"}
_MAX_REASON = 300  # characters of a reason's one line (a driver's message can be long)


@dataclass(frozen=True, slots=True)
class StoreHealth:
    store: str  # "tasks", "team", "memory" (the /metrics label)
    degraded: bool
    pending_writes: int
    reason: str | None


def store_health(state: Any) -> list[StoreHealth]:
    """The write health of each store the server has."""
    instances = state.instances
    out = []
    for name, store in (
        ("tasks", state.store),
        ("team", getattr(instances, "team_store", None)),
        ("memory", getattr(instances, "agent_memory", None)),
    ):
        status = getattr(store, "status", None)
        if status is None:
            continue
        info = status()
        pending = int(info.get("pending_writes") or 0)
        reason = None
        if info.get("degraded"):
            error = info.get("last_error") or "unknown error"
            line = " ".join(f"{_SHOWN[name]} writes failing ({pending} waiting): {error}".split())
            reason = line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"
        out.append(StoreHealth(name, bool(info.get("degraded")), pending, reason))
    return out


def degraded_reason(state: Any) -> str | None:
    """None while every write lands; otherwise why not (one line per failing store)."""
    return "; ".join(h.reason for h in store_health(state) if h.reason) or None


def storage_summary(state: Any) -> dict[str, Any]:
    """What /status shows: ``{"status": "ok"|"degraded", "reason", "pending_writes"}``."""
    health = store_health(state)
    reason = "; ".join(h.reason for h in health if h.reason) or None
    pending = sum(h.pending_writes for h in health)
    return {"status": "degraded" if reason else "ok", "reason": reason, "pending_writes": pending}
