"""Probes of remote MAIL servers: ping_swarm, get_swarm_health, get_swarm_registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mail.stdlib._common import error, missing, not_string, settings, stdlib_action
from mail.stdlib.http.actions import check_url, guarded_get_json_bytes, transport_error
from mail.utils.text import loads_valid

URL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "description": "Base URL of the remote MAIL swarm server."}
    },
    "required": ["url"],
}

NOT_A_SWARM = error("remote URL is not a valid MAIL swarm")


async def _probe(args: dict[str, Any], path: str, report: Callable[[Any], str | None]) -> str:
    """GET the remote JSON document at ``path`` and report on it: `report`'s text, or
    NOT_A_SWARM when it returns None (or the answer is not JSON), or an ``Error:`` text."""
    problem = missing(args, "url") or not_string(args, "url") or check_url(args["url"])
    if problem:
        return problem
    # Join without doubling the slash (the original produced ``//health``).
    url = args["url"].rstrip("/") + path if path else args["url"]
    cfg = settings()
    try:
        status, data = await guarded_get_json_bytes(url, cfg)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the agent's Error: text
        return transport_error(exc, cfg)
    if status != 200:
        return error(f"remote URL returned status code {status}")
    try:
        doc = loads_valid(data)
    except ValueError:
        return NOT_A_SWARM
    return report(doc) or NOT_A_SWARM


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _pong(doc: Any) -> str | None:
    swarm = doc.get("swarm") if isinstance(doc, dict) else None
    if (
        isinstance(doc, dict)
        and doc.get("name") == "mail"
        and doc.get("status") == "running"
        and isinstance(swarm, dict)
        and isinstance(swarm.get("name"), str)
        and isinstance(swarm.get("entrypoint"), str)
    ):
        return "pong"
    return None


def _health(doc: Any) -> str | None:
    if (
        isinstance(doc, dict)
        and _nonempty_str(doc.get("status"))
        and _nonempty_str(doc.get("swarm_name"))
    ):
        return str(doc["status"])
    return None


def _registry(doc: Any) -> str | None:
    swarms = doc.get("swarms") if isinstance(doc, dict) else None
    if not isinstance(swarms, list) or not all(
        isinstance(s, dict)
        and isinstance(s.get("swarm_name"), str)
        and isinstance(s.get("base_url"), str)
        for s in swarms
    ):
        return None
    if not swarms:
        # Unreachable in the original, which treated an empty list as "not a swarm".
        return "No swarms found"
    return "\n".join(f"{s['swarm_name']}@{s['base_url']}" for s in swarms)


@stdlib_action("ping_swarm", "Check that a URL is a running MAIL swarm server.", URL_SCHEMA)
async def ping_swarm(args: dict[str, Any]) -> str:
    return await _probe(args, "", _pong)


@stdlib_action("get_swarm_health", "Get the health status of a remote MAIL swarm.", URL_SCHEMA)
async def get_swarm_health(args: dict[str, Any]) -> str:
    return await _probe(args, "/health", _health)


@stdlib_action(
    "get_swarm_registry",
    "List the public swarms a remote MAIL server knows, one `name@url` per line.",
    URL_SCHEMA,
)
async def get_swarm_registry(args: dict[str, Any]) -> str:
    return await _probe(args, "/swarms", _registry)


__all__ = ["get_swarm_health", "get_swarm_registry", "ping_swarm"]
