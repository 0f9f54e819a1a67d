"""Persistence of push delivery: subscriptions, the outbox, deliveries and their attempts.

``WebhookStore`` is the interface the delivery engine (``mail.webhooks``) and the routes use;
``webhooks_memory``, ``webhooks_sqlite`` and ``webhooks_postgres`` implement it (tables in
``webhooks_schema``). The task store writes outbox rows itself, in the batch of the event that
causes them (``sql_base``'s "transactional outbox"); ``add_events`` is the same for a server
without a task store.

Records are plain dicts:

- subscription: ``subscription_id, swarm_name, owner_role, owner_id, kind ("webhook" |
  "request" | "a2a"), scope ("own" | "all"), task_id, url, destination, events (list),
  description, active, disabled_reason, secret, previous_secret, previous_secret_until,
  push_token, push_auth (dict | None), failing_since, created_at, updated_at, expires_at``;
- event (outbox): ``event_id, swarm_name, caller_role, caller_id, task_id, event_type,
  payload (JSON text), created_at``;
- delivery: ``delivery_id, subscription_id, swarm_name, event_id, event_type, task_id,
  payload, status ("pending" | "delivered" | "failed"), attempts, retry_index,
  next_attempt_at, lease_owner, lease_until, last_status, last_error, created_at,
  updated_at, finished_at``;
- attempt: ``delivery_id, attempt, started_at, status_code, latency_ms, response_excerpt,
  error, outcome``.

Times are seconds since the epoch. What is pure (matching, choosing what to claim, building
deliveries) is here, shared by the three implementations.
"""

from __future__ import annotations

import abc
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]
# (attempt, delivery changes, subscription changes or None): one finished attempt.
Finished = tuple[Record, Record, Record | None]

SUBSCRIPTION_COLUMNS: tuple[str, ...] = (
    "subscription_id",
    "swarm_name",
    "owner_role",
    "owner_id",
    "kind",
    "scope",
    "task_id",
    "url",
    "destination",
    "events",
    "description",
    "active",
    "disabled_reason",
    "secret",
    "previous_secret",
    "previous_secret_until",
    "push_token",
    "push_auth",
    "failing_since",
    "created_at",
    "updated_at",
    "expires_at",
)
EVENT_COLUMNS: tuple[str, ...] = (
    "event_id",
    "swarm_name",
    "caller_role",
    "caller_id",
    "task_id",
    "event_type",
    "payload",
    "created_at",
)
DELIVERY_COLUMNS: tuple[str, ...] = (
    "delivery_id",
    "subscription_id",
    "swarm_name",
    "event_id",
    "event_type",
    "task_id",
    "payload",
    "status",
    "attempts",
    "retry_index",
    "next_attempt_at",
    "lease_owner",
    "lease_until",
    "last_status",
    "last_error",
    "created_at",
    "updated_at",
    "finished_at",
)
ATTEMPT_COLUMNS: tuple[str, ...] = (
    "delivery_id",
    "attempt",
    "started_at",
    "status_code",
    "latency_ms",
    "response_excerpt",
    "error",
    "outcome",
)
# Columns a subscription update may change.
UPDATABLE: frozenset[str] = frozenset(
    {
        "url",
        "destination",
        "events",
        "description",
        "active",
        "disabled_reason",
        "secret",
        "previous_secret",
        "previous_secret_until",
        "failing_since",
        "updated_at",
        "expires_at",
    }
)
# What a claimed delivery carries of its subscription (to send it).
SENDING_COLUMNS: tuple[str, ...] = (
    "kind",
    "url",
    "destination",
    "secret",
    "previous_secret",
    "previous_secret_until",
    "push_token",
    "push_auth",
    "failing_since",
    "owner_role",
    "owner_id",
)
# Attempts kept per delivery (manual retries could add more without end).
MAX_ATTEMPTS_KEPT = 100
# Kinds of subscriptions fan-out looks at (A2A push configs get their deliveries directly).
FAN_OUT_KINDS = ("webhook", "request")


def new_id(prefix: str) -> str:
    """``<prefix>_<32 hex digits>``: no dot, as Standard Webhooks asks of a webhook-id."""
    return f"{prefix}_{uuid.uuid4().hex}"


def event_type_matches(patterns: Iterable[str], event_type: str) -> bool:
    """``*`` matches every type, ``task.*`` every type under ``task.``, others exactly."""
    for pattern in patterns:
        if pattern == "*" or pattern == event_type:
            return True
        if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
            return True
    return False


def subscription_matches(sub: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Whether an outbox event goes to this subscription.

    A standing subscription covers its owner's tasks (an admin's with scope "all": every
    task of the swarm); a per-request one only its own task, of its owner.
    """
    if not sub["active"] or sub["kind"] not in FAN_OUT_KINDS:
        return False
    if sub["swarm_name"] != event["swarm_name"]:
        return False
    if sub["kind"] == "request" and sub["task_id"] != event["task_id"]:
        return False
    own = (sub["owner_role"], sub["owner_id"]) == (event["caller_role"], event["caller_id"])
    if not own and not (sub["scope"] == "all" and sub["kind"] == "webhook"):
        return False
    return event_type_matches(sub["events"], event["event_type"])


def quota_error(limit: int) -> str:
    return (
        f"not queued: this subscription already has {limit} deliveries waiting "
        "([server.webhooks] max_pending_deliveries); retry it once the receiver catches up"
    )


def new_delivery(
    sub: Mapping[str, Any],
    event: Mapping[str, Any],
    now: float,
    *,
    refused: str | None = None,
) -> Record:
    """A delivery of `event` to `sub`, due now (or failed at once with `refused`)."""
    return {
        "delivery_id": new_id("msg"),
        "subscription_id": sub["subscription_id"],
        "swarm_name": event["swarm_name"],
        "event_id": event["event_id"],
        "event_type": event["event_type"],
        "task_id": event.get("task_id"),
        "payload": event["payload"],
        "status": "failed" if refused else "pending",
        "attempts": 0,
        "retry_index": 0,
        "next_attempt_at": now,
        "lease_owner": None,
        "lease_until": None,
        "last_status": None,
        "last_error": refused,
        "created_at": now,
        "updated_at": now,
        "finished_at": now if refused else None,
    }


class FanOutIndex:
    """Fan-out subscriptions by owner (an event looks only at its caller's and at the
    admins' `scope: "all"` ones, not at every subscription of the swarm)."""

    def __init__(self, subscriptions: Sequence[Record]) -> None:
        self.all = list(subscriptions)
        self._by_owner: dict[tuple[str, str], list[Record]] = {}
        self._everyone: list[Record] = []
        for sub in subscriptions:
            if sub["scope"] == "all" and sub["kind"] == "webhook":
                self._everyone.append(sub)
            else:
                self._by_owner.setdefault((sub["owner_role"], sub["owner_id"]), []).append(sub)

    def candidates(self, event: Mapping[str, Any]) -> list[Record]:
        own = self._by_owner.get((event["caller_role"], event["caller_id"]), [])
        return own + self._everyone if self._everyone else own

    def matching(self, events: Sequence[Mapping[str, Any]]) -> list[Record]:
        """The subscriptions at least one of `events` goes to (whose pending counts matter)."""
        found: dict[str, Record] = {}
        for event in events:
            for sub in self.candidates(event):
                if subscription_matches(sub, event):
                    found[sub["subscription_id"]] = sub
        return list(found.values())


def plan_fan_out(
    events: Sequence[Mapping[str, Any]],
    subscriptions: Sequence[Mapping[str, Any]] | FanOutIndex,
    pending: Mapping[str, int],
    max_pending: int,
    now: float,
) -> list[Record]:
    """The deliveries for `events` (oldest first): one per matching subscription; past a
    subscription's pending quota a delivery is recorded failed, saying why."""
    index = subscriptions if isinstance(subscriptions, FanOutIndex) else None
    counts = dict(pending)
    deliveries: list[Record] = []
    for event in events:
        candidates = index.candidates(event) if index is not None else subscriptions
        for sub in candidates:  # type: ignore[union-attr]
            if not subscription_matches(sub, event):
                continue
            waiting = counts.get(sub["subscription_id"], 0)
            refused = quota_error(max_pending) if waiting >= max_pending else None
            if refused is None:
                counts[sub["subscription_id"]] = waiting + 1
            deliveries.append(new_delivery(sub, event, now, refused=refused))
    return deliveries


class SubscriptionCache:
    """The decoded fan-out subscriptions of each swarm, reused while their version (count
    and latest `updated_at`: every change sets it) is the same: a busy server fans out
    often and its subscriptions rarely change."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[tuple[Any, ...], FanOutIndex]] = {}

    def get(self, swarm_name: str, version: tuple[Any, ...]) -> FanOutIndex | None:
        found = self._found.get(swarm_name)
        return found[1] if found is not None and found[0] == version else None

    def put(self, swarm_name: str, version: tuple[Any, ...], subs: list[Record]) -> FanOutIndex:
        index = FanOutIndex(subs)
        self._found[swarm_name] = (version, index)
        return index


@dataclass(frozen=True)
class ClaimLimits:
    """How much one claim may take: `total` deliveries, at most `per_destination` under way
    towards one host:port counting `in_flight` (destination -> attempts already under way)."""

    total: int
    per_destination: int
    in_flight: Mapping[str, int]

    def saturated(self) -> list[str]:
        return sorted(d for d, n in self.in_flight.items() if n >= self.per_destination)

    def choose(self, candidates: Sequence[Mapping[str, Any]]) -> list[str]:
        """Delivery ids to claim from `candidates` (due first), within the limits."""
        used = dict(self.in_flight)
        chosen: list[str] = []
        for row in candidates:
            if len(chosen) >= self.total:
                break
            destination = row["destination"]
            if used.get(destination, 0) >= self.per_destination:
                continue
            used[destination] = used.get(destination, 0) + 1
            chosen.append(row["delivery_id"])
        return chosen


def decode_subscription(row: Mapping[str, Any]) -> Record:
    """A subscription record from a row (JSON columns decoded, flags as bools)."""
    record = {name: row[name] for name in SUBSCRIPTION_COLUMNS}
    record["events"] = json.loads(record["events"]) if record["events"] else []
    record["push_auth"] = json.loads(record["push_auth"]) if record["push_auth"] else None
    record["active"] = bool(record["active"])
    return record


def decode_auth(value: Any) -> Any:
    """The ``push_auth`` column as a dict (None when empty)."""
    return json.loads(value) if isinstance(value, str) and value else None


def encode_value(column: str, value: Any) -> Any:
    """A record value as its column holds it (lists and dicts as JSON text)."""
    if column in ("events", "push_auth") and value is not None and not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"))
    return value


class WebhookStore(abc.ABC):
    """Subscriptions, outbox, deliveries and attempts of one server (or deployment)."""

    async def start(self) -> None:
        """Open connections; create tables where the store does so itself."""
        return None

    async def close(self) -> None:
        """Release connections. Idempotent."""
        return None

    # -- subscriptions ------------------------------------------------------------------
    @abc.abstractmethod
    async def add_subscription(self, sub: Record) -> None: ...

    @abc.abstractmethod
    async def get_subscription(self, subscription_id: str) -> Record | None: ...

    @abc.abstractmethod
    async def list_subscriptions(
        self,
        swarm_name: str,
        *,
        owner: tuple[str, str] | None = None,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
    ) -> list[Record]:
        """Oldest first; `owner` (role, id), `kinds` and `task_id` narrow the list."""

    @abc.abstractmethod
    async def update_subscription(self, subscription_id: str, changes: Record) -> Record | None:
        """Apply `changes` (UPDATABLE columns); the updated record, None when unknown."""

    @abc.abstractmethod
    async def delete_subscription(self, subscription_id: str) -> bool:
        """Forget a subscription with its deliveries and their attempts."""

    # -- outbox and deliveries ------------------------------------------------------------
    @abc.abstractmethod
    async def add_events(self, events: Sequence[Record]) -> None:
        """Outbox rows written outside a task store batch (a server without one)."""

    @abc.abstractmethod
    async def fan_out(self, swarm_name: str, now: float, limit: int, max_pending: int) -> int:
        """Turn up to `limit` outbox events into deliveries and drop them, atomically;
        returns how many deliveries were created. Concurrent callers take different events."""

    @abc.abstractmethod
    async def add_deliveries(self, deliveries: Sequence[Record]) -> None: ...

    @abc.abstractmethod
    async def claim(
        self, swarm_name: str, now: float, limits: ClaimLimits, owner: str, lease_until: float
    ) -> list[Record]:
        """Take due pending deliveries of active subscriptions (a lease until
        `lease_until`); each record also carries its subscription's SENDING_COLUMNS.
        Concurrent callers never get the same delivery while its lease runs."""

    async def finish(
        self, attempt: Record, delivery: Record, subscription: Record | None = None
    ) -> None:
        """Record an attempt and the delivery's new state (`delivery`: its changed columns
        with `delivery_id`), and maybe its subscription's (`subscription`: changed columns
        with `subscription_id`), in one transaction; the lease is released."""
        await self.finish_many([(attempt, delivery, subscription)])

    @abc.abstractmethod
    async def finish_many(self, finished: Sequence[Finished]) -> None:
        """`finish` for several attempts, in one transaction, in order."""

    @abc.abstractmethod
    async def get_delivery(self, delivery_id: str) -> Record | None: ...

    @abc.abstractmethod
    async def list_deliveries(
        self,
        subscription_id: str,
        *,
        status: str | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
    ) -> list[Record]:
        """Newest first, each with its ``attempts_log`` (oldest attempt first); `before`
        ((created_at, delivery_id) of the last one seen) pages on."""

    @abc.abstractmethod
    async def retry(self, delivery_id: str, now: float) -> Record | None:
        """Make a delivery pending again, due now, with the whole retry schedule ahead."""

    @abc.abstractmethod
    async def pending_count(self, swarm_name: str) -> int: ...

    @abc.abstractmethod
    async def release_leases(self, swarm_name: str) -> int:
        """Drop every lease (a single server starting: nobody else can hold one)."""

    @abc.abstractmethod
    async def cleanup(self, now: float, retention: float) -> int:
        """Forget deliveries finished more than `retention` seconds ago and expired
        per-request / A2A subscriptions (with their deliveries); returns rows removed."""
