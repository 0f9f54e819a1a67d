"""Persistence of push delivery: subscriptions, the outbox, deliveries and their attempts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
        "push_token",
        "push_auth",
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
# Characters of a task id that name its series: a per-request subscription's ``task_id`` is a
# whole task id (that task) or that long (every task of the series: a cron's runs).
SERIES_CHARS = 24


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


def covers(sub_task_id: str | None, task_id: str | None) -> bool:
    """Whether a per-request subscription of `sub_task_id` covers task `task_id`: the task
    itself, or the series it starts with."""
    return task_id is not None and sub_task_id in (task_id, task_id[:SERIES_CHARS])


def subscription_matches(sub: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Whether an outbox event goes to this subscription.

    A standing subscription covers its owner's tasks (an admin's with scope "all": every
    task of the swarm); a per-request one only its own task (or series), of its owner.
    """
    if not sub["active"] or sub["kind"] not in FAN_OUT_KINDS:
        return False
    if sub["swarm_name"] != event["swarm_name"]:
        return False
    if sub["kind"] == "request" and not covers(sub["task_id"], event["task_id"]):
        return False
    own = (sub["owner_role"], sub["owner_id"]) == (event["caller_role"], event["caller_id"])
    if not own and not (sub["scope"] == "all" and sub["kind"] == "webhook"):
        return False
    return event_type_matches(sub["events"], event["event_type"])


class OverQuota(Exception):
    """A bound of the caller's would be passed: nothing was stored; the message says which
    bound, and which setting raises it."""


@dataclass(frozen=True)
class Bound:
    """At most `limit` live (unexpired) subscriptions of the new one's swarm that share its
    values of `columns` (e.g. its owner and kind: per caller; and its task: per task).
    `message` (``{count}`` in it: how many there are) is the refusal."""

    columns: tuple[str, ...]
    limit: int
    message: str

    def refusal(self, count: int) -> OverQuota:
        return OverQuota(self.message.replace("{count}", str(count)))


@dataclass(frozen=True)
class PendingLimits:
    """Deliveries that may wait at once (pending): per subscription, and per owner across
    all of theirs (webhooks, per-request webhooks, A2A push configs)."""

    per_subscription: int
    per_owner: int


class Waiting:
    """Pending deliveries as counted in the transaction that adds more: per subscription and
    per owner. `rows`: (subscription_id, owner_role, owner_id, pending) of every subscription
    of the owners concerned (their total is the owner's count)."""

    def __init__(self, rows: Iterable[Sequence[Any]], limits: PendingLimits) -> None:
        self.limits = limits
        self._per_sub: dict[str, int] = {}
        self._owner_of: dict[str, tuple[str, str]] = {}
        self._per_owner: dict[tuple[str, str], int] = {}
        for sub_id, role, owner_id, pending in rows:
            owner = (role, owner_id)
            self._per_sub[sub_id] = int(pending)
            self._owner_of[sub_id] = owner
            self._per_owner[owner] = self._per_owner.get(owner, 0) + int(pending)

    def admit(self, subscription_id: str) -> str | None:
        """Book one more pending delivery of a subscription; None, or why it may not wait
        (then nothing is booked)."""
        waiting = self._per_sub.get(subscription_id, 0)
        if waiting >= self.limits.per_subscription:
            return (
                f"not queued: this subscription already has {waiting} deliveries waiting "
                "([server.webhooks] max_pending_deliveries); retry it once the receiver "
                "catches up"
            )
        owner = self._owner_of.get(subscription_id)
        mine = self._per_owner.get(owner, 0) if owner is not None else 0
        if mine >= self.limits.per_owner:
            return (
                f"not queued: your webhooks and push configs already have {mine} deliveries "
                "waiting ([server.webhooks] max_pending_deliveries_per_caller); retry it once "
                "your receivers catch up"
            )
        self._per_sub[subscription_id] = waiting + 1
        if owner is not None:
            self._per_owner[owner] = mine + 1
        return None

    def book(self, deliveries: Sequence[Record], *, refuse: bool = False) -> list[Record]:
        """`deliveries` as they are stored: the pending ones past a bound recorded failed,
        saying why (`refuse`: raise OverQuota instead, nothing stored)."""
        booked = []
        for delivery in deliveries:
            why = (
                self.admit(delivery["subscription_id"]) if delivery["status"] == "pending" else None
            )
            if why is not None:
                if refuse:
                    raise OverQuota(why)
                delivery = {**delivery, "status": "failed", "last_error": why}
                delivery["finished_at"] = delivery["updated_at"]
            booked.append(delivery)
        return booked


def new_delivery(sub: Mapping[str, Any], event: Mapping[str, Any], now: float) -> Record:
    """A delivery of `event` to `sub`, due now."""
    return {
        "delivery_id": new_id("msg"),
        "subscription_id": sub["subscription_id"],
        "swarm_name": event["swarm_name"],
        "event_id": event["event_id"],
        "event_type": event["event_type"],
        "task_id": event.get("task_id"),
        "payload": event["payload"],
        "status": "pending",
        "attempts": 0,
        "retry_index": 0,
        "next_attempt_at": now,
        "lease_owner": None,
        "lease_until": None,
        "last_status": None,
        "last_error": None,
        "created_at": now,
        "updated_at": now,
        "finished_at": None,
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
    waiting: Waiting,
    now: float,
) -> list[Record]:
    """The deliveries for `events` (oldest first): one per matching subscription; past a
    pending bound (`waiting`) a delivery is recorded failed, saying why."""
    index = subscriptions if isinstance(subscriptions, FanOutIndex) else None
    deliveries: list[Record] = []
    for event in events:
        candidates = index.candidates(event) if index is not None else subscriptions
        for sub in candidates:  # type: ignore[union-attr]
            if subscription_matches(sub, event):
                deliveries.append(new_delivery(sub, event, now))
    return waiting.book(deliveries)


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


Owner = tuple[str, str]


@dataclass(frozen=True)
class ClaimLimits:
    """How much one claim may take: `total` deliveries (the free slots), at most
    `per_destination` under way towards one host:port counting `in_flight` (destination ->
    attempts already under way), and at most `per_owner` of one owner's (role, id) counting
    `owners_in_flight`. The last `reserved` free slots go only to owners with nothing under
    way: an owner with an attempt under way starts another only while `reserved` slots stay
    free. (Owners with attempts under way then hold at most every slot but `reserved`, plus
    one each: while fewer than `reserved` owners have attempts under way, however long
    theirs hang, an owner with none finds a free slot.)"""

    total: int
    per_destination: int
    in_flight: Mapping[str, int]
    per_owner: int = 1 << 30
    owners_in_flight: Mapping[Owner, int] = field(default_factory=dict)
    reserved: int = 0

    @property
    def window(self) -> int:
        """How many of the first due deliveries a claim chooses from."""
        return max(self.total * 4, 32)

    def saturated(self) -> list[str]:
        return sorted(d for d, n in self.in_flight.items() if n >= self.per_destination)

    def saturated_owners(self) -> list[Owner]:
        """Owners this claim gives nothing: at their share, or (when only the reserved slots
        are free) with anything under way."""
        cap = 1 if self.total <= self.reserved else self.per_owner
        return sorted(o for o, n in self.owners_in_flight.items() if n >= cap)

    def look_past(
        self, candidates: Sequence[Mapping[str, Any]], found: int, left_out: Sequence[Owner]
    ) -> list[Owner] | None:
        """The owners the claim's next reading of the due deliveries leaves out, or None when
        it has read enough. A reading that filled its `window` (`found` rows) may hide,
        behind the backlog of the owners it found, the first due delivery of an owner with
        fewer attempts under way, who must go first: when every slot was held by owners at
        their share, the one an owner freed went back to that owner, whose backlog filled
        the window, until all of it had been tried. Enough: the window was not full, or the
        owners found with nothing under way would take every slot anyway (an owner found
        later falls due later and loses the tie). Each reading finds a new owner, and only
        owners with attempts under way (at most `max_in_flight`) or `total` owners without
        are read past, so the readings are bounded."""
        if found < self.window:
            return None
        seen = {(row["owner_role"], row["owner_id"]) for row in candidates}
        if sum(1 for o in seen if not self.owners_in_flight.get(o)) >= self.total:
            return None
        return sorted(seen.union(left_out))

    def choose(self, candidates: Sequence[Mapping[str, Any]]) -> list[str]:
        """Delivery ids to claim from `candidates` (the `window` first due, past the
        saturated destinations and owners; each with its ``owner_rank``: its place among its
        owner's, `rank_by_owner`), within the limits, taking turns: the owner with the
        fewest attempts under way goes first (round robin across owners), each in the order
        its deliveries fell due, and an owner's second slot or later only outside the
        `reserved` ones. An owner or destination this claim saturates drops out of the next
        one's candidates, which then reach past its backlog (the engine claims again at
        once)."""
        used = dict(self.in_flight)
        owners = dict(self.owners_in_flight)

        def turn(row: Mapping[str, Any]) -> tuple[int, float, float]:
            owner = (row["owner_role"], row["owner_id"])
            return (
                owners.get(owner, 0) + int(row["owner_rank"]),
                row["next_attempt_at"],
                row["created_at"],
            )

        chosen: list[str] = []
        for row in sorted(candidates, key=turn):
            if len(chosen) >= self.total:
                break
            destination = row["destination"]
            owner = (row["owner_role"], row["owner_id"])
            if used.get(destination, 0) >= self.per_destination:
                continue
            under_way = owners.get(owner, 0)
            if under_way >= self.per_owner:
                continue
            if under_way and len(chosen) >= self.total - self.reserved:
                continue
            used[destination] = used.get(destination, 0) + 1
            owners[owner] = owners.get(owner, 0) + 1
            chosen.append(row["delivery_id"])
        return chosen


def rank_by_owner(candidates: list[Record]) -> list[Record]:
    """Give each candidate (in due order) its ``owner_rank``: 1 for its owner's first."""
    seen: dict[Owner, int] = {}
    for row in candidates:
        owner = (row["owner_role"], row["owner_id"])
        seen[owner] = row["owner_rank"] = seen.get(owner, 0) + 1
    return candidates


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
