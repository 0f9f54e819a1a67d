"""The WebhookStore of SQLite and PostgreSQL: one SQL text for both (`mail.store.sql`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mail.store.schema import WEBHOOK_TABLES
from mail.store.sql import PostgresSql, Sql, SqlConn, SqliteSql, marks
from mail.store.sqlite_schema import MEMORY, SqliteDatabase, open_database
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
    decode_auth,
    decode_subscription,
    encode_value,
    plan_fan_out,
    rank_by_owner,
)


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
_CLAIM = (
    f"SELECT {_DELIVERY}, {_SENDING} FROM webhook_deliveries d"
    " JOIN webhook_subscriptions s ON s.subscription_id = d.subscription_id"
    " WHERE d.swarm_name = ? AND d.status = 'pending' AND d.next_attempt_at <= ?"
    " AND (d.lease_until IS NULL OR d.lease_until < ?) AND s.active = TRUE"
)
_FAN_OUT_WHERE = "swarm_name = ? AND active = TRUE AND kind = ANY(?)"
# The pending deliveries of every subscription of the owners of some subscriptions.
_WAITING = (
    "SELECT s.subscription_id, s.owner_role, s.owner_id, (SELECT count(*) FROM"
    " webhook_deliveries d WHERE d.subscription_id = s.subscription_id"
    " AND d.status = 'pending') FROM webhook_subscriptions s"
    " WHERE (s.swarm_name, s.owner_role, s.owner_id) IN (SELECT swarm_name,"
    " owner_role, owner_id FROM webhook_subscriptions WHERE subscription_id = ANY(?))"
)
# Two-key advisory locks of one owner's subscriptions (PostgreSQL; the first key: this store's).
_OWNER_LOCK = 7415002


async def _lock_owners(c: SqlConn, owners: Sequence[Sequence[str]]) -> None:
    """Hold (to the transaction's end) the locks of these (swarm, role, id) owners, in order:
    what one of them adds (a subscription, deliveries) is counted against its bounds by one
    transaction at a time, on every server sharing the database. (SQLite: one writer.)"""
    if c.postgres:
        keys = sorted({"\x1f".join(owner) for owner in owners})
        await c.execute(  # one statement; the keys in order (two callers never cross)
            "SELECT pg_advisory_xact_lock(?, hashtext(k))"
            " FROM (SELECT k FROM unnest(?::text[]) AS k ORDER BY k) AS ordered",
            _OWNER_LOCK,
            keys,
        )


async def _subscriptions(c: SqlConn, where: str, *args: Any) -> list[Record]:
    rows = await c.fetch(
        f"SELECT * FROM webhook_subscriptions WHERE {where} ORDER BY created_at, subscription_id",
        *args,
    )
    return [decode_subscription(r) for r in rows]


async def _with_attempts(c: SqlConn, rows: list[Any]) -> list[Record]:
    ids = [r["delivery_id"] for r in rows]
    logs: dict[str, list[Record]] = {i: [] for i in ids}
    if ids:
        for row in await c.fetch(
            "SELECT * FROM webhook_attempts WHERE delivery_id = ANY(?)"
            " ORDER BY delivery_id, attempt",
            ids,
        ):
            logs[row["delivery_id"]].append({k: row[k] for k in ATTEMPT_COLUMNS})
    return [
        {**{k: r[k] for k in DELIVERY_COLUMNS}, "attempts_log": logs[r["delivery_id"]]}
        for r in rows
    ]


async def _waiting(c: SqlConn, sub_ids: Sequence[str], pending: PendingLimits) -> Waiting:
    """Locks the owners of `sub_ids`, then counts their pending deliveries."""
    if not sub_ids:
        return Waiting([], pending)
    if c.postgres:
        owners = await c.fetch(
            "SELECT DISTINCT swarm_name, owner_role, owner_id FROM webhook_subscriptions"
            " WHERE subscription_id = ANY(?)",
            list(sub_ids),
        )
        await _lock_owners(c, [tuple(r) for r in owners])
    return Waiting(await c.fetch(_WAITING, list(sub_ids)), pending)


async def _update(
    c: SqlConn, table: str, key: str, changes: Record, expect: Record | None = None
) -> int:
    columns = [
        k for k in changes if k != key and (table != "webhook_subscriptions" or k in UPDATABLE)
    ]
    if not columns:
        return 0
    expected = [k for k in (expect or {}) if k in SUBSCRIPTION_COLUMNS]
    return await c.execute(
        f"UPDATE {table} SET {', '.join(f'{k} = ?' for k in columns)} WHERE {key} = ?"
        + "".join(f" AND {k} = ?" for k in expected),
        *(encode_value(k, changes[k]) for k in columns),
        changes[key],
        *(encode_value(k, (expect or {})[k]) for k in expected),
    )


async def _add_subscription(
    c: SqlConn, sub: Record, bounds: Sequence[Bound], same: Sequence[str], refresh: Sequence[str]
) -> Record:
    now = time.time()

    def where(columns: Sequence[str]) -> tuple[str, list[Any]]:
        names = ("swarm_name", *columns)
        return " AND ".join(f"{k} = ?" for k in names), [encode_value(k, sub[k]) for k in names]

    async with c.transaction():
        await _lock_owners(c, [(sub["swarm_name"], sub["owner_role"], sub["owner_id"])])
        if same:
            text, args = where(same)
            found = await _subscriptions(c, text, *args)
            if found:
                changes = {k: sub[k] for k in refresh}
                changes.update(updated_at=now, subscription_id=found[0]["subscription_id"])
                await _update(c, "webhook_subscriptions", "subscription_id", changes)
                return {**found[0], **changes}
        for bound in bounds:
            text, args = where(bound.columns)
            count = await c.fetchval(
                f"SELECT count(*) FROM webhook_subscriptions WHERE {text}"
                " AND (expires_at IS NULL OR expires_at >= ?)",
                *args,
                now,
            )
            if count >= bound.limit:
                raise bound.refusal(count)
        await c.execute(
            _INSERT_SUBSCRIPTION, *(encode_value(k, sub.get(k)) for k in SUBSCRIPTION_COLUMNS)
        )
    return sub


async def _update_subscription(
    c: SqlConn, subscription_id: str, changes: Record, expect: Record | None
) -> Record | None:
    async with c.transaction():
        changes = {**changes, "subscription_id": subscription_id}
        updated = await _update(c, "webhook_subscriptions", "subscription_id", changes, expect)
        if expect and not updated:
            return None
        found = await _subscriptions(c, "subscription_id = ?", subscription_id)
    return found[0] if found else None


async def _delete_deliveries(c: SqlConn, where: str, *args: Any) -> int:
    await c.execute(
        "DELETE FROM webhook_attempts WHERE delivery_id IN"
        f" (SELECT delivery_id FROM webhook_deliveries WHERE {where})",
        *args,
    )
    return await c.execute(f"DELETE FROM webhook_deliveries WHERE {where}", *args)


async def _delete_subscription(c: SqlConn, subscription_id: str) -> bool:
    async with c.transaction():
        await _delete_deliveries(c, "subscription_id = ?", subscription_id)
        return bool(
            await c.execute(
                "DELETE FROM webhook_subscriptions WHERE subscription_id = ?", subscription_id
            )
        )


async def _add_events(c: SqlConn, events: Sequence[Record]) -> None:
    async with c.transaction():
        await c.executemany(_INSERT_EVENT, [[e[k] for k in EVENT_COLUMNS] for e in events])


async def _fan_out_subscriptions(c: SqlConn, swarm: str, cache: SubscriptionCache) -> FanOutIndex:
    kinds = list(FAN_OUT_KINDS)
    version = tuple(
        await c.fetchrow(
            f"SELECT count(*), max(updated_at) FROM webhook_subscriptions WHERE {_FAN_OUT_WHERE}",
            swarm,
            kinds,
        )
        or ()
    )
    index = cache.get(swarm, version)
    if index is None:
        index = cache.put(swarm, version, await _subscriptions(c, _FAN_OUT_WHERE, swarm, kinds))
    return index


async def _fan_out(
    c: SqlConn,
    swarm: str,
    now: float,
    limit: int,
    pending: PendingLimits,
    cache: SubscriptionCache,
    wait: bool,
) -> int:
    async with c.transaction():
        events = [
            dict(r)
            for r in await c.fetch(
                "SELECT * FROM webhook_events WHERE swarm_name = ? ORDER BY created_at LIMIT ?"
                + c.locking(" FOR UPDATE" if wait else " FOR UPDATE SKIP LOCKED"),
                swarm,
                limit,
            )
        ]
        if not events:
            return 0
        index = await _fan_out_subscriptions(c, swarm, cache)
        matched = [s["subscription_id"] for s in index.matching(events)]
        planned = plan_fan_out(events, index, await _waiting(c, matched, pending), now)
        await c.executemany(_INSERT_DELIVERY, [[d[k] for k in DELIVERY_COLUMNS] for d in planned])
        await c.execute(
            "DELETE FROM webhook_events WHERE event_id = ANY(?)", [e["event_id"] for e in events]
        )
    return len(planned)


async def _add_deliveries(
    c: SqlConn, deliveries: Sequence[Record], pending: PendingLimits, refuse: bool
) -> None:
    async with c.transaction():
        ids = sorted({d["subscription_id"] for d in deliveries})
        booked = (await _waiting(c, ids, pending)).book(deliveries, refuse=refuse)
        await c.executemany(_INSERT_DELIVERY, [[d[k] for k in DELIVERY_COLUMNS] for d in booked])


async def _claim(
    c: SqlConn, swarm: str, now: float, limits: ClaimLimits, owner: str, lease_until: float
) -> list[Record]:
    saturated = limits.saturated()
    # Short lists as IN (?, ?): json_each's table costs SQLite more on this hot path.
    skip = f" AND s.destination NOT IN ({marks(saturated)})" if saturated else ""
    async with c.transaction():
        rows: list[Record] = []
        left_out: list[Owner] | None = limits.saturated_owners()
        while left_out is not None:
            found = await c.fetch(
                _CLAIM
                + skip
                + " AND NOT (s.owner_role = ? AND s.owner_id = ?)" * len(left_out)
                + " ORDER BY d.next_attempt_at, d.created_at LIMIT ?"
                + c.locking(" FOR UPDATE OF d SKIP LOCKED"),
                swarm,
                now,
                now,
                *saturated,
                *(part for pair in left_out for part in pair),
                limits.window,
            )
            rows.extend(dict(r) for r in found)
            left_out = limits.look_past(rows, len(found), left_out)
        candidates = rank_by_owner(rows)
        chosen = limits.choose(candidates)
        if not chosen:
            return []
        await c.execute(
            "UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ?"
            f" WHERE delivery_id IN ({marks(chosen)})",
            owner,
            lease_until,
            *chosen,
        )
    picked = set(chosen)
    claimed = []
    for row in candidates:
        if row["delivery_id"] in picked:
            row["lease_owner"], row["lease_until"] = owner, lease_until
            row["push_auth"] = decode_auth(row["push_auth"])
            claimed.append(row)
    return claimed


async def _finish(c: SqlConn, finished: Sequence[Finished]) -> None:
    async with c.transaction():
        for attempt, delivery, subscription in finished:
            await c.execute(_INSERT_ATTEMPT, *(attempt.get(k) for k in ATTEMPT_COLUMNS))
            if attempt["attempt"] > MAX_ATTEMPTS_KEPT:
                await c.execute(
                    "DELETE FROM webhook_attempts WHERE delivery_id = ? AND attempt <= ?",
                    attempt["delivery_id"],
                    attempt["attempt"] - MAX_ATTEMPTS_KEPT,
                )
            await _update(
                c,
                "webhook_deliveries",
                "delivery_id",
                {**delivery, "lease_owner": None, "lease_until": None},
            )
            if subscription is not None:
                await _update(c, "webhook_subscriptions", "subscription_id", subscription)


async def _get_delivery(c: SqlConn, delivery_id: str) -> Record | None:
    rows = await c.fetch("SELECT * FROM webhook_deliveries WHERE delivery_id = ?", delivery_id)
    return (await _with_attempts(c, rows))[0] if rows else None


async def _list_deliveries(c: SqlConn, where: str, *args: Any) -> list[Record]:
    rows = await c.fetch(
        f"SELECT * FROM webhook_deliveries WHERE {where}"
        " ORDER BY created_at DESC, delivery_id DESC LIMIT ?",
        *args,
    )
    return await _with_attempts(c, rows)


async def _retry(c: SqlConn, delivery_id: str, now: float, pending: PendingLimits) -> Record | None:
    async with c.transaction():
        found = await c.fetchrow(
            "SELECT subscription_id, status FROM webhook_deliveries WHERE delivery_id = ?",
            delivery_id,
        )
        if found is None:
            return None
        if found["status"] != "pending":
            sub_id = found["subscription_id"]
            why = (await _waiting(c, [sub_id], pending)).admit(sub_id)
            if why is not None:
                raise OverQuota(why)
        row = await c.fetchrow(
            "UPDATE webhook_deliveries SET status = 'pending', retry_index = 0,"
            " next_attempt_at = ?1, lease_owner = NULL, lease_until = NULL,"
            " updated_at = ?1, finished_at = NULL WHERE delivery_id = ?2 RETURNING *",
            now,
            delivery_id,
        )
    return {k: row[k] for k in DELIVERY_COLUMNS} if row is not None else None


async def _cleanup(c: SqlConn, now: float, retention: float) -> int:
    async with c.transaction():
        expired = [
            r["subscription_id"]
            for r in await c.fetch(
                "SELECT subscription_id FROM webhook_subscriptions"
                " WHERE expires_at IS NOT NULL AND expires_at < ?",
                now,
            )
        ]
        removed = 0
        if expired:
            removed += await _delete_deliveries(c, "subscription_id = ANY(?)", expired)
            removed += await c.execute(
                "DELETE FROM webhook_subscriptions WHERE subscription_id = ANY(?)", expired
            )
        return removed + await _delete_deliveries(
            c, "finished_at IS NOT NULL AND finished_at < ?", now - retention
        )


class WebhookStore:
    """Subscriptions, outbox, deliveries and attempts of one server (or deployment), on
    SQLite or PostgreSQL: each method one operation of `self.sql`."""

    sql: Sql

    def __init__(self) -> None:
        self._subs = SubscriptionCache()

    async def start(self) -> None:
        """Open connections; create tables where the store does so itself."""

    async def close(self) -> None:
        """Release connections. Idempotent."""

    # -- subscriptions ------------------------------------------------------------------
    async def add_subscription(
        self,
        sub: Record,
        *,
        bounds: Sequence[Bound] = (),
        same: Sequence[str] = (),
        refresh: Sequence[str] = (),
    ) -> Record:
        """Store `sub` and return it, in one transaction that also checks `bounds` (raising
        OverQuota, nothing stored). With `same` (columns): a subscription of `sub`'s swarm
        equal to it in those columns is kept instead, its `refresh` columns (and
        ``updated_at``) taking `sub`'s values: that one is returned. Concurrent adds of
        one owner are serialized, so no burst passes a bound or makes two of the `same`."""
        return await self.sql.run(_add_subscription, sub, bounds, same, refresh)

    async def get_subscription(self, subscription_id: str) -> Record | None:
        found = await self.sql.run(_subscriptions, "subscription_id = ?", subscription_id)
        return found[0] if found else None

    async def list_subscriptions(
        self,
        swarm_name: str,
        *,
        owner: tuple[str, str] | None = None,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
    ) -> list[Record]:
        """Oldest first; `owner` (role, id), `kinds` and `task_id` narrow the list."""
        where, args = ["swarm_name = ?"], [swarm_name]
        if owner is not None:
            where.append("owner_role = ? AND owner_id = ?")
            args.extend(owner)
        if kinds is not None:
            where.append("kind = ANY(?)")
            args.append(list(kinds))  # type: ignore[arg-type]
        if task_id is not None:
            where.append("task_id = ?")
            args.append(task_id)
        return await self.sql.run(_subscriptions, " AND ".join(where), *args)

    async def update_subscription(
        self, subscription_id: str, changes: Record, *, expect: Record | None = None
    ) -> Record | None:
        """Apply `changes` (UPDATABLE columns); the updated record, None when unknown. With
        `expect` (column -> value), only while the subscription still holds those values
        (a compare-and-set: of concurrent updates expecting the same values, one wins; the
        others get None and change nothing)."""
        changes = {"updated_at": time.time(), **changes}  # the fan-out cache's version
        return await self.sql.run(_update_subscription, subscription_id, changes, expect)

    async def delete_subscription(self, subscription_id: str) -> bool:
        """Forget a subscription with its deliveries and their attempts."""
        return await self.sql.run(_delete_subscription, subscription_id)

    # -- outbox and deliveries ------------------------------------------------------------
    async def add_events(self, events: Sequence[Record]) -> None:
        """Outbox rows written outside a task store batch (a server without one)."""
        await self.sql.run(_add_events, list(events))

    async def fan_out(
        self, swarm_name: str, now: float, limit: int, pending: PendingLimits, *, wait: bool = False
    ) -> int:
        """Turn up to `limit` outbox events into deliveries and drop them, atomically
        (past a `pending` bound a delivery is recorded failed, saying why); returns how many
        deliveries were created. Concurrent callers take different events; with `wait`, events
        another caller is fanning out are waited for (when it returns, every event committed
        before the call has its deliveries), otherwise skipped."""
        return await self.sql.run(_fan_out, swarm_name, now, limit, pending, self._subs, wait)

    async def add_deliveries(
        self, deliveries: Sequence[Record], pending: PendingLimits, *, refuse: bool = False
    ) -> None:
        """Store pending deliveries; past a `pending` bound one is recorded failed, saying
        why (`refuse`: OverQuota is raised instead, and nothing is stored)."""
        await self.sql.run(_add_deliveries, list(deliveries), pending, refuse)

    async def claim(
        self, swarm_name: str, now: float, limits: ClaimLimits, owner: str, lease_until: float
    ) -> list[Record]:
        """Take due pending deliveries of active subscriptions (a lease until
        `lease_until`); each record also carries its subscription's SENDING_COLUMNS.
        Concurrent callers never get the same delivery while its lease runs."""
        return await self.sql.run(_claim, swarm_name, now, limits, owner, lease_until)

    async def finish(
        self, attempt: Record, delivery: Record, subscription: Record | None = None
    ) -> None:
        """Record an attempt and the delivery's new state (`delivery`: its changed columns
        with `delivery_id`), and maybe its subscription's (`subscription`: changed columns
        with `subscription_id`), in one transaction; the lease is released."""
        await self.finish_many([(attempt, delivery, subscription)])

    async def finish_many(self, finished: Sequence[Finished]) -> None:
        """`finish` for several attempts, in one transaction, in order."""
        await self.sql.run(_finish, list(finished))

    async def get_delivery(self, delivery_id: str) -> Record | None:
        return await self.sql.run(_get_delivery, delivery_id)

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
        where, args = ["subscription_id = ?"], [subscription_id]
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if before is not None:
            where.append("(created_at, delivery_id) < (?, ?)")
            args.extend(before)  # type: ignore[arg-type]
        return await self.sql.run(_list_deliveries, " AND ".join(where), *args, limit)

    async def retry(self, delivery_id: str, now: float, pending: PendingLimits) -> Record | None:
        """Make a delivery pending again, due now, with the whole retry schedule ahead
        (OverQuota when a finished one would pass a `pending` bound)."""
        return await self.sql.run(_retry, delivery_id, now, pending)

    async def pending_count(self, swarm_name: str) -> int:
        return int(
            await self.sql.run(
                lambda c: c.fetchval(
                    "SELECT count(*) FROM webhook_deliveries WHERE swarm_name = ?"
                    " AND status = 'pending'",
                    swarm_name,
                )
            )
        )

    async def release_leases(self, swarm_name: str) -> int:
        # PostgreSQL: other servers may hold leases on these tables: only expired ones are
        # theirs to lose, which claiming already handles.
        """Drop every lease (a single server starting: nobody else can hold one)."""
        if self.sql.postgres:
            return 0
        return await self.sql.run(
            lambda c: c.execute(
                "UPDATE webhook_deliveries SET lease_owner = NULL, lease_until = NULL"
                " WHERE swarm_name = ? AND lease_owner IS NOT NULL",
                swarm_name,
            )
        )

    async def cleanup(self, now: float, retention: float) -> int:
        """Forget deliveries finished more than `retention` seconds ago and expired
        per-request / A2A subscriptions (with their deliveries); returns rows removed."""
        return await self.sql.run(_cleanup, now, retention)


class SqliteWebhookStore(WebhookStore):
    def __init__(self, path: str | Path | SqliteDatabase = MEMORY) -> None:
        """`path`: the server's database file, or a database already open (a task store's);
        by default (`MEMORY`) a private in-memory database (`--store memory`)."""
        super().__init__()
        self.db = path if isinstance(path, SqliteDatabase) else open_database(path)
        self.sql = self._sqlite = SqliteSql(self.db, "the webhook store cannot be used now")
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.db.release()

    async def fan_out(
        self, swarm_name: str, now: float, limit: int, pending: PendingLimits, *, wait: bool = False
    ) -> int:
        # On the database's thread: a round writes one delivery row per event and matching
        # subscription (thousands with many subscriptions), too long a stall for the loop.
        # Tasks no subscription can match write no event (mail.webhooks.interest), so a
        # server without subscriptions runs no round.
        planned = await self._sqlite.run_pages(
            _fan_out, 4, swarm_name, now, limit, pending, self._subs, wait
        )
        self.db.note_written(planned // 4)  # delivery rows, a few per page
        return planned


class PostgresWebhookStore(WebhookStore):
    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 4) -> None:
        from mail.store.postgres_schema import normalize_dsn

        super().__init__()
        self._dsn = normalize_dsn(database_url)
        self._min_size, self._max_size = min_size, max_size
        self._pool: Any = None
        self.sql = PostgresSql(
            lambda: self._pool, "the database of the webhooks cannot be reached now"
        )

    async def start(self) -> None:
        from mail.store.postgres_schema import open_pool

        if self._pool is None:
            self._pool = await open_pool(
                self._dsn,
                self._prepare,
                purpose=" for webhooks",
                min_size=self._min_size,
                max_size=self._max_size,
                command_timeout=60,
                server_settings={"application_name": "mail-webhooks"},
            )

    async def _prepare(self, conn: Any) -> None:
        from mail.store.postgres_schema import create_unless_forbidden

        await create_unless_forbidden(conn, WEBHOOK_TABLES)

    async def close(self) -> None:
        from mail.store.postgres_schema import close_pool

        pool, self._pool = self._pool, None
        await close_pool(pool)
