"""Whether the server's writes are landing: one answer for /health, /status, /metrics and
the console.

Every store that writes (tasks, team messaging, agent memory) retries a write the database
refuses for a transient reason (a full disk, PostgreSQL down) until it lands. While any of
them is retrying, the server is *degraded*: it keeps answering and nothing it acknowledged
is lost, but what it holds is only in memory until the database takes it. The reason says
which store, for how long and the database's own words (``database or disk is full``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A reason is one line of at most this many characters (a driver's message can be long).
_MAX_REASON = 300


@dataclass(frozen=True, slots=True)
class StoreHealth:
    store: str  # "tasks", "team", "memory" (the /metrics label)
    degraded: bool
    pending_writes: int
    reason: str | None


_SHOWN = {"tasks": "task store", "team": "team store", "memory": "agent memory"}


def _stores(state: Any) -> list[tuple[str, Any]]:
    instances = state.instances
    found = [
        ("tasks", state.store),
        ("team", getattr(instances, "team_store", None)),
        ("memory", getattr(instances, "agent_memory", None)),
    ]
    return [(name, store) for name, store in found if store is not None]


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"


def store_health(state: Any) -> list[StoreHealth]:
    """The write health of each store the server has."""
    out = []
    for name, store in _stores(state):
        status = getattr(store, "status", None)
        if status is None:
            continue
        info = status()
        degraded = bool(info.get("degraded"))
        pending = int(info.get("pending_writes") or 0)
        reason = None
        if degraded:
            error = info.get("last_error") or "unknown error"
            reason = _one_line(f"{_SHOWN[name]} writes failing ({pending} waiting): {error}")
        out.append(StoreHealth(name, degraded, pending, reason))
    return out


def degraded_reason(state: Any) -> str | None:
    """None while every write lands; otherwise why not (one line per failing store)."""
    reasons = [h.reason for h in store_health(state) if h.degraded and h.reason]
    return "; ".join(reasons) if reasons else None


def storage_summary(state: Any) -> dict[str, Any]:
    """What /status shows: ``{"status": "ok"|"degraded", "reason", "pending_writes"}``."""
    health = store_health(state)
    reason = "; ".join(h.reason for h in health if h.degraded and h.reason) or None
    return {
        "status": "degraded" if reason else "ok",
        "reason": reason,
        "pending_writes": sum(h.pending_writes for h in health),
    }
