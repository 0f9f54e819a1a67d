"""Which events some subscription could want: the check that spares a task its outbox rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mail.store.webhooks import FAN_OUT_KINDS, SERIES_CHARS, event_type_matches

Owner = tuple[str, str]


@dataclass(frozen=True, slots=True)
class _Entry:
    owner: Owner
    kind: str
    everyone: bool  # an admin's scope "all": every caller's tasks
    task_id: str | None
    events: tuple[str, ...]
    active: bool
    expires_at: float | None
    seq: int  # when it was put (SubscriptionInterest.mark)


class SubscriptionInterest:
    """The fan-out subscriptions of one swarm, by what they cover: an owner's tasks, one
    task or series of an owner (per-request webhooks), or everyone's (admins' scope "all")."""

    def __init__(self, swarm_name: str) -> None:
        self.swarm_name = swarm_name
        self._entries: dict[str, _Entry] = {}
        self._by_owner: dict[Owner, dict[str, _Entry]] = {}
        self._by_task: dict[tuple[Owner, str], dict[str, _Entry]] = {}
        self._everyone: dict[str, _Entry] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def load(self, subscriptions: Iterable[Mapping[str, Any]]) -> None:
        for sub in subscriptions:
            self.put(sub)

    def _bucket(self, entry: _Entry) -> dict[str, _Entry]:
        if entry.everyone:
            return self._everyone
        if entry.kind == "request":
            return self._by_task.setdefault((entry.owner, entry.task_id or ""), {})
        return self._by_owner.setdefault(entry.owner, {})

    def put(self, sub: Mapping[str, Any]) -> None:
        """A subscription as the store now holds it (added or changed)."""
        if sub["kind"] not in FAN_OUT_KINDS or sub["swarm_name"] != self.swarm_name:
            return
        sub_id = sub["subscription_id"]
        self.remove(sub_id)
        entry = _Entry(
            owner=(sub["owner_role"], sub["owner_id"]),
            kind=sub["kind"],
            everyone=sub["kind"] == "webhook" and sub["scope"] == "all",
            task_id=sub["task_id"],
            events=tuple(sub["events"]),
            active=bool(sub["active"]),
            expires_at=sub["expires_at"],
            seq=self._seq,
        )
        self._seq += 1
        self._entries[sub_id] = entry
        self._bucket(entry)[sub_id] = entry

    def widen(self, sub: Mapping[str, Any]) -> None:
        """Before a change is written: cover what the subscription covers now and what it
        will (its events both ways, active if either is), whichever the store ends with."""
        old = self._entries.get(sub["subscription_id"])
        if old is None or old.kind != sub["kind"]:
            self.put(sub)
            return
        events = list(dict.fromkeys([*old.events, *sub["events"]]))
        self.put({**sub, "events": events, "active": old.active or bool(sub["active"])})

    def remove(self, subscription_id: str) -> None:
        entry = self._entries.pop(subscription_id, None)
        if entry is None:
            return
        bucket = self._bucket(entry)
        bucket.pop(subscription_id, None)
        if not bucket and not entry.everyone:
            if entry.kind == "request":
                self._by_task.pop((entry.owner, entry.task_id or ""), None)
            else:
                self._by_owner.pop(entry.owner, None)

    def mark(self) -> int:
        """Taken before the store's cleanup: entries put earlier were in the store by then."""
        return self._seq

    def forget_expired(self, before: float, mark: int) -> None:
        """The store's cleanup at `before`, started at `mark`, deleted every subscription
        that had expired by `before`: drop those here too (put before `mark`, so the cleanup
        saw them; one stored later stays until the next cleanup)."""
        gone = [
            sub_id
            for sub_id, entry in self._entries.items()
            if entry.expires_at is not None and entry.expires_at < before and entry.seq < mark
        ]
        for sub_id in gone:
            self.remove(sub_id)

    def _candidates(self, owner: Owner, task_id: str) -> list[_Entry]:
        found: list[_Entry] = []
        own = self._by_owner.get(owner)
        if own:
            found.extend(own.values())
        if self._by_task:  # the task's per-request subscriptions, and its series' (a cron's)
            for key in (task_id, task_id[:SERIES_CHARS]):
                request = self._by_task.get((owner, key))
                if request:
                    found.extend(request.values())
        if self._everyone:
            found.extend(self._everyone.values())
        return found

    def watches(self, owner: Owner, task_id: str) -> bool:
        """Whether some subscription covers this task at all (before its event type is known)."""
        return any(entry.active for entry in self._candidates(owner, task_id))

    def wants(self, owner: Owner, task_id: str, event_type: str) -> bool:
        """Whether some subscription could take this event of this caller's task."""
        return any(
            entry.active and event_type_matches(entry.events, event_type)
            for entry in self._candidates(owner, task_id)
        )
