"""In-process WebhookStore: the push delivery state of a server without a database
(``[server.store] kind = "memory"``): it lasts as long as the process, like its tasks."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

from mail.store.webhooks import (
    MAX_ATTEMPTS_KEPT,
    SENDING_COLUMNS,
    UPDATABLE,
    Bound,
    ClaimLimits,
    Finished,
    OverQuota,
    PendingLimits,
    Record,
    Waiting,
    WebhookStore,
    plan_fan_out,
    rank_by_owner,
)


class MemoryWebhookStore(WebhookStore):
    def __init__(self) -> None:
        self.subscriptions: dict[str, Record] = {}
        self.events: dict[str, Record] = {}
        self.deliveries: dict[str, Record] = {}
        self.attempts: dict[str, list[Record]] = {}
        self._pairs: set[tuple[str, str]] = set()

    # -- subscriptions ------------------------------------------------------------------
    async def add_subscription(
        self,
        sub: Record,
        *,
        bounds: Sequence[Bound] = (),
        same: Sequence[str] = (),
        refresh: Sequence[str] = (),
    ) -> Record:
        now = time.time()
        ours = [s for s in self.subscriptions.values() if s["swarm_name"] == sub["swarm_name"]]
        for found in ours:
            if same and all(found[c] == sub[c] for c in same):
                found.update({c: copy.deepcopy(sub[c]) for c in refresh}, updated_at=now)
                return copy.deepcopy(found)
        live = [s for s in ours if s["expires_at"] is None or s["expires_at"] >= now]
        for bound in bounds:
            count = sum(1 for s in live if all(s[c] == sub[c] for c in bound.columns))
            if count >= bound.limit:
                raise bound.refusal(count)
        self.subscriptions[sub["subscription_id"]] = copy.deepcopy(sub)
        return copy.deepcopy(sub)

    async def get_subscription(self, subscription_id: str) -> Record | None:
        sub = self.subscriptions.get(subscription_id)
        return copy.deepcopy(sub) if sub is not None else None

    async def list_subscriptions(
        self,
        swarm_name: str,
        *,
        owner: tuple[str, str] | None = None,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
    ) -> list[Record]:
        found = [
            copy.deepcopy(s)
            for s in self.subscriptions.values()
            if s["swarm_name"] == swarm_name
            and (owner is None or (s["owner_role"], s["owner_id"]) == owner)
            and (kinds is None or s["kind"] in kinds)
            and (task_id is None or s["task_id"] == task_id)
        ]
        return sorted(found, key=lambda s: (s["created_at"], s["subscription_id"]))

    async def update_subscription(
        self, subscription_id: str, changes: Record, *, expect: Record | None = None
    ) -> Record | None:
        changes = {"updated_at": time.time(), **changes}  # the fan-out cache's version
        sub = self.subscriptions.get(subscription_id)
        if sub is None or any(sub.get(k) != v for k, v in (expect or {}).items()):
            return None
        sub.update({k: copy.deepcopy(v) for k, v in changes.items() if k in UPDATABLE})
        return copy.deepcopy(sub)

    async def delete_subscription(self, subscription_id: str) -> bool:
        if self.subscriptions.pop(subscription_id, None) is None:
            return False
        for delivery_id in [
            d for d, row in self.deliveries.items() if row["subscription_id"] == subscription_id
        ]:
            self._forget(delivery_id)
        return True

    def _forget(self, delivery_id: str) -> None:
        row = self.deliveries.pop(delivery_id)
        self._pairs.discard((row["subscription_id"], row["event_id"]))
        self.attempts.pop(delivery_id, None)

    # -- outbox and deliveries ------------------------------------------------------------
    async def add_events(self, events: Sequence[Record]) -> None:
        for event in events:
            self.events.setdefault(event["event_id"], dict(event))

    def _waiting(self, pending: PendingLimits) -> Waiting:
        counts: dict[str, int] = {}
        for row in self.deliveries.values():
            if row["status"] == "pending":
                counts[row["subscription_id"]] = counts.get(row["subscription_id"], 0) + 1
        rows = [
            (sub_id, s["owner_role"], s["owner_id"], counts.get(sub_id, 0))
            for sub_id, s in self.subscriptions.items()
        ]
        return Waiting(rows, pending)

    async def fan_out(
        self, swarm_name: str, now: float, limit: int, pending: PendingLimits, *, wait: bool = False
    ) -> int:
        taken = sorted(
            (e for e in self.events.values() if e["swarm_name"] == swarm_name),
            key=lambda e: e["created_at"],
        )[:limit]
        if not taken:
            return 0
        subs = [s for s in self.subscriptions.values() if s["swarm_name"] == swarm_name]
        planned = plan_fan_out(taken, subs, self._waiting(pending), now)
        self._insert(planned)
        for event in taken:
            del self.events[event["event_id"]]
        return len(planned)

    async def add_deliveries(
        self, deliveries: Sequence[Record], pending: PendingLimits, *, refuse: bool = False
    ) -> None:
        self._insert(self._waiting(pending).book(deliveries, refuse=refuse))

    def _insert(self, deliveries: Sequence[Record]) -> None:
        for delivery in deliveries:
            pair = (delivery["subscription_id"], delivery["event_id"])
            if pair not in self._pairs:  # (subscription, event) is unique, as in SQL
                self._pairs.add(pair)
                self.deliveries[delivery["delivery_id"]] = dict(delivery)

    async def claim(
        self, swarm_name: str, now: float, limits: ClaimLimits, owner: str, lease_until: float
    ) -> list[Record]:
        candidates = []
        for row in self.deliveries.values():
            sub = self.subscriptions.get(row["subscription_id"])
            if (
                sub is None
                or not sub["active"]
                or row["swarm_name"] != swarm_name
                or row["status"] != "pending"
                or row["next_attempt_at"] > now
                or (row["lease_until"] is not None and row["lease_until"] >= now)
            ):
                continue
            candidates.append({**row, **{c: sub[c] for c in SENDING_COLUMNS}})
        candidates.sort(key=lambda r: (r["next_attempt_at"], r["created_at"]))
        chosen = set(limits.choose(rank_by_owner(candidates)))
        claimed = []
        for row in candidates:
            if row["delivery_id"] in chosen:
                stored = self.deliveries[row["delivery_id"]]
                stored.update(lease_owner=owner, lease_until=lease_until)
                claimed.append(copy.deepcopy({**row, "lease_owner": owner}))
        return claimed

    async def finish_many(self, finished: Sequence[Finished]) -> None:
        for attempt, delivery, subscription in finished:
            log = self.attempts.setdefault(attempt["delivery_id"], [])
            log.append(dict(attempt))
            del log[:-MAX_ATTEMPTS_KEPT]
            stored = self.deliveries.get(delivery["delivery_id"])
            if stored is not None:
                stored.update(delivery, lease_owner=None, lease_until=None)
            if subscription is not None:
                await self.update_subscription(subscription["subscription_id"], subscription)

    async def get_delivery(self, delivery_id: str) -> Record | None:
        row = self.deliveries.get(delivery_id)
        if row is None:
            return None
        return {
            **copy.deepcopy(row),
            "attempts_log": copy.deepcopy(self.attempts.get(delivery_id, [])),
        }

    async def list_deliveries(
        self,
        subscription_id: str,
        *,
        status: str | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
    ) -> list[Record]:
        rows = sorted(
            (
                d
                for d in self.deliveries.values()
                if d["subscription_id"] == subscription_id
                and (status is None or d["status"] == status)
                and (before is None or (d["created_at"], d["delivery_id"]) < before)
            ),
            key=lambda d: (d["created_at"], d["delivery_id"]),
            reverse=True,
        )[:limit]
        return [
            {
                **copy.deepcopy(d),
                "attempts_log": copy.deepcopy(self.attempts.get(d["delivery_id"], [])),
            }
            for d in rows
        ]

    async def retry(self, delivery_id: str, now: float, pending: PendingLimits) -> Record | None:
        row = self.deliveries.get(delivery_id)
        if row is None:
            return None
        if row["status"] != "pending":
            why = self._waiting(pending).admit(row["subscription_id"])
            if why is not None:
                raise OverQuota(why)
        row.update(
            status="pending",
            retry_index=0,
            next_attempt_at=now,
            lease_owner=None,
            lease_until=None,
            updated_at=now,
            finished_at=None,
        )
        return copy.deepcopy(row)

    async def pending_count(self, swarm_name: str) -> int:
        return sum(
            1
            for d in self.deliveries.values()
            if d["swarm_name"] == swarm_name and d["status"] == "pending"
        )

    async def release_leases(self, swarm_name: str) -> int:
        released = 0
        for row in self.deliveries.values():
            if row["swarm_name"] == swarm_name and row["lease_owner"] is not None:
                row.update(lease_owner=None, lease_until=None)
                released += 1
        return released

    async def cleanup(self, now: float, retention: float) -> int:
        cutoff = now - retention
        removed = 0
        for sub_id in [
            s
            for s, sub in self.subscriptions.items()
            if sub["expires_at"] is not None and sub["expires_at"] < now
        ]:
            await self.delete_subscription(sub_id)
            removed += 1
        for delivery_id in [
            d
            for d, row in self.deliveries.items()
            if row["finished_at"] is not None and row["finished_at"] < cutoff
        ]:
            self._forget(delivery_id)
            removed += 1
        return removed
