"""Whether the server's writes are landing: one answer for /health, /status, /metrics and
the console.

Every store that writes (tasks, team messaging, agent memory) retries a write the database
refuses for a transient reason (a full disk, PostgreSQL down) until it lands. While any of
them is retrying, the server is *degraded*: it keeps answering and nothing it acknowledged
is lost, but what it holds is only in memory until the database takes it. The reason says
which store, for how long and the database's own words (``database or disk is full``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

logger = logging.getLogger("mail.server")

# What a refused new task is told to wait (seconds): the writer retries every 5 s at most.
STORE_BACKED_UP_RETRY_AFTER = 5
# Refusals are logged at most this often (seconds): one line per episode, not per request.
_REFUSAL_LOG_INTERVAL = 30.0
_last_refusal_log = [float("-inf")]

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


def check_room_for_new_task(state: Any) -> None:
    """503 with ``Retry-After`` while the task store holds `[server.store]
    max_pending_writes` unwritten writes (the database does not take them: an outage, a
    full disk): a new task would only wait in memory, and could not be stored before its
    caller hears about it. A message to a running or paused task is not refused here (its
    work goes on; its agents' turns wait for the database instead)."""
    store: Any = getattr(state, "store", None)
    backed_up = getattr(store, "writes_backed_up", None)
    if backed_up is None or not backed_up():
        return
    limit = getattr(store, "max_pending_writes", None)
    now = time.monotonic()
    if now - _last_refusal_log[0] >= _REFUSAL_LOG_INTERVAL:
        _last_refusal_log[0] = now
        logger.warning(
            "refusing new tasks (503): the task store holds %s unwritten writes "
            "([server.store] max_pending_writes); last error: %s",
            limit,
            store.last_error,
        )
    raise HTTPException(
        503,
        f"the task store holds {limit} writes the database has not taken yet (the most it "
        f"holds: [server.store] max_pending_writes; last error: {store.last_error}); new "
        "tasks are refused until they are written, try again later",
        headers={"Retry-After": str(STORE_BACKED_UP_RETRY_AFTER)},
    )
