"""SQLite WebhookStore, in the server's database file (the task store's `SqliteDatabase`).

One connection on one thread: every method below is one call on that thread, and the ones
that change several rows do it in one ``BEGIN IMMEDIATE`` transaction (a bound checked and
the row added in one: nothing passes between them). No job returns a cursor: one let go of
on the event loop's thread resets its statement there, maybe while the thread runs the next
job (``sqlite3.InterfaceError``; tests/test_webhooks_sqlite_threads.py). A SQLite file has
one server (``ProcessLock``), so leases only matter across that server's restarts.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mail.store.base import StoreUnavailableError
from mail.store.sqlite_schema import open_database, transaction
from mail.store.webhooks import (
    ATTEMPT_COLUMNS,
    DELIVERY_COLUMNS,
    EVENT_COLUMNS,
    FAN_OUT_KINDS,
    MAX_ATTEMPTS_KEPT,
    SENDING_COLUMNS,
    SUBSCRIPTION_COLUMNS,
    UPDATABLE,
    Bound,
    ClaimLimits,
    FanOutIndex,
    Finished,
    OverQuota,
    Owner,
    PendingLimits,
    Record,
    SubscriptionCache,
    Waiting,
    WebhookStore,
    decode_auth,
    decode_subscription,
    encode_value,
    plan_fan_out,
    rank_by_owner,
)

T = TypeVar("T")


def _insert(table: str, columns: Sequence[str], conflict: str = "") -> str:
    marks = ", ".join("?" for _ in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}){conflict}"


_INSERT_SUBSCRIPTION = _insert("webhook_subscriptions", SUBSCRIPTION_COLUMNS)
_INSERT_EVENT = _insert("webhook_events", EVENT_COLUMNS, " ON CONFLICT (event_id) DO NOTHING")
_INSERT_DELIVERY = _insert(
    "webhook_deliveries", DELIVERY_COLUMNS, " ON CONFLICT (subscription_id, event_id) DO NOTHING"
)
_INSERT_ATTEMPT = _insert(
    "webhook_attempts", ATTEMPT_COLUMNS, " ON CONFLICT (delivery_id, attempt) DO NOTHING"
)
_SENDING = ", ".join(f"s.{c}" for c in SENDING_COLUMNS)
_DELIVERY = ", ".join(f"d.{c}" for c in DELIVERY_COLUMNS)


def _sub_values(sub: Record) -> tuple[Any, ...]:
    return tuple(encode_value(c, sub.get(c)) for c in SUBSCRIPTION_COLUMNS)


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


def _subscriptions(conn: sqlite3.Connection, where: str, args: Sequence[Any]) -> list[Record]:
    rows = conn.execute(
        f"SELECT * FROM webhook_subscriptions WHERE {where} ORDER BY created_at, subscription_id",
        tuple(args),
    ).fetchall()
    return [decode_subscription(r) for r in rows]


def _attempts(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[Record]]:
    logs: dict[str, list[Record]] = {i: [] for i in ids}
    if ids:
        for row in conn.execute(
            f"SELECT * FROM webhook_attempts WHERE delivery_id IN ({_marks(ids)})"
            " ORDER BY delivery_id, attempt",
            tuple(ids),
        ):
            logs[row["delivery_id"]].append({c: row[c] for c in ATTEMPT_COLUMNS})
    return logs


def _with_attempts(conn: sqlite3.Connection, rows: list[sqlite3.Row]) -> list[Record]:
    logs = _attempts(conn, [r["delivery_id"] for r in rows])
    return [
        {**{c: r[c] for c in DELIVERY_COLUMNS}, "attempts_log": logs[r["delivery_id"]]}
        for r in rows
    ]


_FAN_OUT_WHERE = f"swarm_name = ? AND active = 1 AND kind IN ({_marks(FAN_OUT_KINDS)})"


def _fan_out_subscriptions(
    conn: sqlite3.Connection, swarm: str, cache: SubscriptionCache
) -> FanOutIndex:
    args = (swarm, *FAN_OUT_KINDS)
    version = tuple(
        conn.execute(
            f"SELECT count(*), max(updated_at) FROM webhook_subscriptions WHERE {_FAN_OUT_WHERE}",
            args,
        ).fetchone()
    )
    index = cache.get(swarm, version)
    if index is None:
        index = cache.put(swarm, version, _subscriptions(conn, _FAN_OUT_WHERE, args))
    return index


def _fan_out(
    conn: sqlite3.Connection,
    swarm: str,
    now: float,
    limit: int,
    pending: PendingLimits,
    cache: SubscriptionCache,
) -> int:
    # The whole call runs on the database's one thread: a read before the write transaction
    # sees what the transaction will (and an idle poll takes no write lock).
    events = [
        dict(r)
        for r in conn.execute(
            "SELECT * FROM webhook_events WHERE swarm_name = ? ORDER BY created_at LIMIT ?",
            (swarm, limit),
        )
    ]
    if not events:
        return 0
    with transaction(conn):
        index = _fan_out_subscriptions(conn, swarm, cache)
        matched = [s["subscription_id"] for s in index.matching(events)]
        planned = plan_fan_out(events, index, _waiting(conn, matched, pending), now)
        _insert_deliveries(conn, planned)
        taken = [e["event_id"] for e in events]
        conn.execute(f"DELETE FROM webhook_events WHERE event_id IN ({_marks(taken)})", taken)
    return len(planned)


def _waiting(conn: sqlite3.Connection, sub_ids: Sequence[str], pending: PendingLimits) -> Waiting:
    """Pending deliveries of every subscription of the owners of `sub_ids`."""
    rows = []
    if sub_ids:
        rows = conn.execute(
            "SELECT s.subscription_id, s.owner_role, s.owner_id, (SELECT count(*) FROM"
            " webhook_deliveries d WHERE d.subscription_id = s.subscription_id"
            " AND d.status = 'pending') FROM webhook_subscriptions s"
            " WHERE (s.swarm_name, s.owner_role, s.owner_id) IN (SELECT swarm_name,"
            " owner_role, owner_id FROM webhook_subscriptions"
            f" WHERE subscription_id IN ({_marks(sub_ids)}))",
            tuple(sub_ids),
        ).fetchall()
    return Waiting(rows, pending)


def _insert_deliveries(conn: sqlite3.Connection, deliveries: Sequence[Record]) -> None:
    rows = [tuple(d[c] for c in DELIVERY_COLUMNS) for d in deliveries]
    conn.executemany(_INSERT_DELIVERY, rows)


def _add_deliveries(
    conn: sqlite3.Connection,
    deliveries: Sequence[Record],
    pending: PendingLimits,
    refuse: bool,
) -> None:
    with transaction(conn):
        ids = sorted({d["subscription_id"] for d in deliveries})
        _insert_deliveries(conn, _waiting(conn, ids, pending).book(deliveries, refuse=refuse))


def _add_subscription(
    conn: sqlite3.Connection,
    sub: Record,
    bounds: Sequence[Bound],
    same: Sequence[str],
    refresh: Sequence[str],
) -> Record:
    now = time.time()
    with transaction(conn):
        if same:
            columns = ("swarm_name", *same)
            where = " AND ".join(f"{c} = ?" for c in columns)
            found = _subscriptions(conn, where, [encode_value(c, sub[c]) for c in columns])
            if found:
                changes = {c: sub[c] for c in refresh}
                changes.update(updated_at=now, subscription_id=found[0]["subscription_id"])
                _update(conn, "webhook_subscriptions", "subscription_id", changes)
                return {**found[0], **changes}
        for bound in bounds:
            columns = ("swarm_name", *bound.columns)
            where = " AND ".join(f"{c} = ?" for c in columns)
            count = conn.execute(
                f"SELECT count(*) FROM webhook_subscriptions WHERE {where}"
                " AND (expires_at IS NULL OR expires_at >= ?)",
                (*(encode_value(c, sub[c]) for c in columns), now),
            ).fetchone()[0]
            if count >= bound.limit:
                raise bound.refusal(count)
        conn.execute(_INSERT_SUBSCRIPTION, _sub_values(sub))
    return sub


def _claim(
    conn: sqlite3.Connection,
    swarm: str,
    now: float,
    limits: ClaimLimits,
    owner: str,
    lease_until: float,
) -> list[Record]:
    saturated = limits.saturated()
    skip = f" AND s.destination NOT IN ({_marks(saturated)})" if saturated else ""
    rows: list[Record] = []
    left_out: list[Owner] | None = limits.saturated_owners()
    while left_out is not None:
        found = conn.execute(  # read first: see _fan_out
            f"SELECT {_DELIVERY}, {_SENDING} FROM webhook_deliveries d"
            " JOIN webhook_subscriptions s ON s.subscription_id = d.subscription_id"
            " WHERE d.swarm_name = ? AND d.status = 'pending' AND d.next_attempt_at <= ?"
            " AND (d.lease_until IS NULL OR d.lease_until < ?) AND s.active = 1"
            + skip
            + "".join(" AND NOT (s.owner_role = ? AND s.owner_id = ?)" for _ in left_out)
            + " ORDER BY d.next_attempt_at, d.created_at LIMIT ?",
            (swarm, now, now, *saturated, *(p for pair in left_out for p in pair), limits.window),
        ).fetchall()
        rows.extend(dict(r) for r in found)
        left_out = limits.look_past(rows, len(found), left_out)
    candidates = rank_by_owner(rows)
    chosen = limits.choose(candidates)
    if not chosen:
        return []
    with transaction(conn):
        conn.execute(
            "UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ?"
            f" WHERE delivery_id IN ({_marks(chosen)})",
            (owner, lease_until, *chosen),
        )
    picked = set(chosen)
    claimed = []
    for row in candidates:
        if row["delivery_id"] in picked:
            row["lease_owner"], row["lease_until"] = owner, lease_until
            row["push_auth"] = decode_auth(row["push_auth"])
            claimed.append(row)
    return claimed


def _retry(
    conn: sqlite3.Connection, delivery_id: str, now: float, pending: PendingLimits
) -> Record | None:
    with transaction(conn):
        found = conn.execute(
            "SELECT subscription_id, status FROM webhook_deliveries WHERE delivery_id = ?",
            (delivery_id,),
        ).fetchone()
        if found is None:
            return None
        if found["status"] != "pending":
            why = _waiting(conn, [found["subscription_id"]], pending).admit(
                found["subscription_id"]
            )
            if why is not None:
                raise OverQuota(why)
        conn.execute(
            "UPDATE webhook_deliveries SET status = 'pending', retry_index = 0,"
            " next_attempt_at = ?, lease_owner = NULL, lease_until = NULL,"
            " updated_at = ?, finished_at = NULL WHERE delivery_id = ?",
            (now, now, delivery_id),
        )
        row = conn.execute(
            "SELECT * FROM webhook_deliveries WHERE delivery_id = ?", (delivery_id,)
        ).fetchone()
    return {c: row[c] for c in DELIVERY_COLUMNS}


def _update(
    conn: sqlite3.Connection, table: str, key: str, changes: Record, expect: Record | None = None
) -> int:
    columns = [
        c for c in changes if c != key and (table != "webhook_subscriptions" or c in UPDATABLE)
    ]
    if not columns:
        return 0
    assignments = ", ".join(f"{c} = ?" for c in columns)
    values = [encode_value(c, changes[c]) for c in columns]
    expected = [c for c in (expect or {}) if c in SUBSCRIPTION_COLUMNS]
    condition = "".join(f" AND {c} = ?" for c in expected)
    cursor = conn.execute(
        f"UPDATE {table} SET {assignments} WHERE {key} = ?{condition}",
        (*values, changes[key], *(encode_value(c, (expect or {})[c]) for c in expected)),
    )
    return cursor.rowcount


def _finish(conn: sqlite3.Connection, finished: Sequence[Finished]) -> None:
    with transaction(conn):
        for attempt, delivery, subscription in finished:
            conn.execute(_INSERT_ATTEMPT, tuple(attempt.get(c) for c in ATTEMPT_COLUMNS))
            if attempt["attempt"] > MAX_ATTEMPTS_KEPT:
                conn.execute(
                    "DELETE FROM webhook_attempts WHERE delivery_id = ? AND attempt <= ?",
                    (attempt["delivery_id"], attempt["attempt"] - MAX_ATTEMPTS_KEPT),
                )
            _update(
                conn,
                "webhook_deliveries",
                "delivery_id",
                {**delivery, "lease_owner": None, "lease_until": None},
            )
            if subscription is not None:
                _update(conn, "webhook_subscriptions", "subscription_id", subscription)


def _delete_deliveries(conn: sqlite3.Connection, where: str, args: Sequence[Any]) -> int:
    conn.execute(
        "DELETE FROM webhook_attempts WHERE delivery_id IN"
        f" (SELECT delivery_id FROM webhook_deliveries WHERE {where})",
        tuple(args),
    )
    return conn.execute(f"DELETE FROM webhook_deliveries WHERE {where}", tuple(args)).rowcount


def _delete_subscription(conn: sqlite3.Connection, subscription_id: str) -> bool:
    with transaction(conn):
        _delete_deliveries(conn, "subscription_id = ?", (subscription_id,))
        cursor = conn.execute(
            "DELETE FROM webhook_subscriptions WHERE subscription_id = ?", (subscription_id,)
        )
        return cursor.rowcount > 0


def _cleanup(conn: sqlite3.Connection, now: float, retention: float) -> int:
    removed = 0
    with transaction(conn):
        expired = [
            r["subscription_id"]
            for r in conn.execute(
                "SELECT subscription_id FROM webhook_subscriptions"
                " WHERE expires_at IS NOT NULL AND expires_at < ?",
                (now,),
            )
        ]
        for sub_id in expired:
            removed += _delete_deliveries(conn, "subscription_id = ?", (sub_id,))
            conn.execute("DELETE FROM webhook_subscriptions WHERE subscription_id = ?", (sub_id,))
            removed += 1
        removed += _delete_deliveries(
            conn, "finished_at IS NOT NULL AND finished_at < ?", (now - retention,)
        )
    return removed


class SqliteWebhookStore(WebhookStore):
    def __init__(self, path: str | Path) -> None:
        self.db = open_database(path)
        self._started = False
        self._subs = SubscriptionCache()

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.db.release()

    async def _run(self, fn: Callable[..., T], *args: Any, **options: Any) -> T:
        """`fn(conn, *args)` on the database's thread; a database that does not take it now
        (a full disk, another process's lock: every OperationalError) is the stores'
        StoreUnavailableError (a 503 with Retry-After), not the driver's error (a 500)."""
        try:
            return await self.db.run(fn, *args, **options)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailableError(
                f"the webhook store cannot be used now ({exc}); try again later"
            ) from exc

    async def _write(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """`sql` for each of `rows`, in one transaction; the rows changed. (Nothing of the
        connection, a cursor included, leaves its thread: a cursor let go of on the loop's
        thread resets its statement there, maybe while the next job runs.)"""

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.executemany(sql, rows).rowcount

        return await self._run(run)  # type: ignore[no-any-return]

    # -- subscriptions ------------------------------------------------------------------
    async def add_subscription(
        self,
        sub: Record,
        *,
        bounds: Sequence[Bound] = (),
        same: Sequence[str] = (),
        refresh: Sequence[str] = (),
    ) -> Record:
        return await self._run(_add_subscription, sub, bounds, same, refresh)  # type: ignore[no-any-return]

    async def get_subscription(self, subscription_id: str) -> Record | None:
        found = await self._run(
            lambda c: _subscriptions(c, "subscription_id = ?", (subscription_id,))
        )
        return found[0] if found else None

    async def list_subscriptions(
        self,
        swarm_name: str,
        *,
        owner: tuple[str, str] | None = None,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
    ) -> list[Record]:
        where, args = ["swarm_name = ?"], [swarm_name]
        if owner is not None:
            where.append("owner_role = ? AND owner_id = ?")
            args.extend(owner)
        if kinds is not None:
            where.append(f"kind IN ({_marks(kinds)})")
            args.extend(kinds)
        if task_id is not None:
            where.append("task_id = ?")
            args.append(task_id)
        return await self._run(lambda c: _subscriptions(c, " AND ".join(where), args))  # type: ignore[no-any-return]

    async def update_subscription(
        self, subscription_id: str, changes: Record, *, expect: Record | None = None
    ) -> Record | None:
        changes = {"updated_at": time.time(), **changes}  # the fan-out cache's version

        def run(conn: sqlite3.Connection) -> Record | None:
            with transaction(conn):
                updated = _update(
                    conn,
                    "webhook_subscriptions",
                    "subscription_id",
                    {**changes, "subscription_id": subscription_id},
                    expect,
                )
                if expect and not updated:
                    return None
                found = _subscriptions(conn, "subscription_id = ?", (subscription_id,))
            return found[0] if found else None

        return await self._run(run)  # type: ignore[no-any-return]

    async def delete_subscription(self, subscription_id: str) -> bool:
        return await self._run(_delete_subscription, subscription_id)  # type: ignore[no-any-return]

    # -- outbox and deliveries ------------------------------------------------------------
    async def add_events(self, events: Sequence[Record]) -> None:
        await self._write(_INSERT_EVENT, [tuple(e[c] for c in EVENT_COLUMNS) for e in events])

    async def fan_out(
        self, swarm_name: str, now: float, limit: int, pending: PendingLimits, *, wait: bool = False
    ) -> int:
        # On the database's thread: a round writes one delivery row per event and matching
        # subscription (thousands with many subscriptions), too long a stall for the loop.
        # Tasks no subscription can match write no event (mail.webhooks.interest), so a
        # server without subscriptions runs no round.
        # (`wait` needs nothing here: every job of the file runs on that one thread.)
        planned: int = await self._run(
            _fan_out, swarm_name, now, limit, pending, self._subs, pages=4
        )
        self.db.note_written(planned // 4)  # delivery rows, a few per page
        return planned

    async def add_deliveries(
        self, deliveries: Sequence[Record], pending: PendingLimits, *, refuse: bool = False
    ) -> None:
        await self._run(_add_deliveries, list(deliveries), pending, refuse)

    async def claim(
        self, swarm_name: str, now: float, limits: ClaimLimits, owner: str, lease_until: float
    ) -> list[Record]:
        return await self._run(_claim, swarm_name, now, limits, owner, lease_until)  # type: ignore[no-any-return]

    async def finish_many(self, finished: Sequence[Finished]) -> None:
        await self._run(_finish, list(finished))

    async def get_delivery(self, delivery_id: str) -> Record | None:
        def run(conn: sqlite3.Connection) -> Record | None:
            rows = conn.execute(
                "SELECT * FROM webhook_deliveries WHERE delivery_id = ?", (delivery_id,)
            ).fetchall()
            return _with_attempts(conn, rows)[0] if rows else None

        return await self._run(run)  # type: ignore[no-any-return]

    async def list_deliveries(
        self,
        subscription_id: str,
        *,
        status: str | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
    ) -> list[Record]:
        where: list[str] = ["subscription_id = ?"]
        args: list[Any] = [subscription_id]
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if before is not None:
            where.append("(created_at < ? OR (created_at = ? AND delivery_id < ?))")
            args.extend([before[0], before[0], before[1]])

        def run(conn: sqlite3.Connection) -> list[Record]:
            rows = conn.execute(
                f"SELECT * FROM webhook_deliveries WHERE {' AND '.join(where)}"
                " ORDER BY created_at DESC, delivery_id DESC LIMIT ?",
                (*args, limit),
            ).fetchall()
            return _with_attempts(conn, rows)

        return await self._run(run)  # type: ignore[no-any-return]

    async def retry(self, delivery_id: str, now: float, pending: PendingLimits) -> Record | None:
        return await self._run(_retry, delivery_id, now, pending)  # type: ignore[no-any-return]

    async def pending_count(self, swarm_name: str) -> int:
        row = await self._run(
            lambda c: c.execute(
                "SELECT count(*) FROM webhook_deliveries WHERE swarm_name = ?"
                " AND status = 'pending'",
                (swarm_name,),
            ).fetchone()
        )
        return int(row[0])

    async def release_leases(self, swarm_name: str) -> int:
        return await self._write(
            "UPDATE webhook_deliveries SET lease_owner = NULL, lease_until = NULL"
            " WHERE swarm_name = ? AND lease_owner IS NOT NULL",
            [(swarm_name,)],
        )

    async def cleanup(self, now: float, retention: float) -> int:
        return await self._run(_cleanup, now, retention)  # type: ignore[no-any-return]
