"""PostgreSQL WebhookStore (asyncpg), with its own small pool.

Several servers (front ends, instance hosts of a cluster) share these tables. Outbox events
are fanned out and pending deliveries claimed with ``FOR UPDATE ... SKIP LOCKED``, so two
servers never take the same row; a claimed delivery carries a lease (``lease_until``), and a
server that dies holding one loses it when the lease runs out: another server takes it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mail.store.base import StoreUnavailableError
from mail.store.postgres import is_transient_error
from mail.store.postgres_schema import (
    ensure_schema,
    missing_tables,
    normalize_dsn,
    open_pool,
    refusal_reason,
)
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
from mail.store.webhooks_schema import TABLES

logger = logging.getLogger("mail.store.webhooks")


def _insert(table: str, columns: Sequence[str], conflict: str = "") -> str:
    marks = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
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

_CLAIM_SQL = f"""
    SELECT {_DELIVERY}, {_SENDING} FROM webhook_deliveries d
    JOIN webhook_subscriptions s ON s.subscription_id = d.subscription_id
    WHERE d.swarm_name = $1 AND d.status = 'pending' AND d.next_attempt_at <= $2
      AND (d.lease_until IS NULL OR d.lease_until < $2) AND s.active
      AND NOT (s.destination = ANY($3::text[]))
      AND NOT ((s.owner_role || chr(31) || s.owner_id) = ANY($4::text[]))
    ORDER BY d.next_attempt_at, d.created_at
    LIMIT $5
    FOR UPDATE OF d SKIP LOCKED
"""

_FAN_OUT_EVENTS_SQL = """
    SELECT * FROM webhook_events WHERE swarm_name = $1 ORDER BY created_at LIMIT $2
    FOR UPDATE
"""

# The pending deliveries of every subscription of the owners of some subscriptions.
_WAITING_SQL = """
    SELECT s.subscription_id, s.owner_role, s.owner_id,
           (SELECT count(*) FROM webhook_deliveries d
            WHERE d.subscription_id = s.subscription_id AND d.status = 'pending')
    FROM webhook_subscriptions s
    WHERE (s.swarm_name, s.owner_role, s.owner_id) IN (
        SELECT swarm_name, owner_role, owner_id FROM webhook_subscriptions
        WHERE subscription_id = ANY($1::text[]))
"""
# Two-key advisory locks of one owner's subscriptions (the first key: this store's).
_OWNER_LOCK = 7415002


async def _lock_owners(conn: Any, owners: Sequence[tuple[str, str, str]]) -> None:
    """Hold (to the transaction's end) the locks of these (swarm, role, id) owners, in order:
    what one of them adds (a subscription, deliveries) is counted against its bounds by one
    transaction at a time, on every server sharing the database."""
    keys = sorted({f"{swarm}\x1f{role}\x1f{owner_id}" for swarm, role, owner_id in owners})
    await conn.execute(  # one statement; the keys in order (two callers never cross)
        "SELECT pg_advisory_xact_lock($1, hashtext(k))"
        " FROM (SELECT k FROM unnest($2::text[]) AS k ORDER BY k) AS ordered",
        _OWNER_LOCK,
        keys,
    )


async def _owners_of(conn: Any, sub_ids: Sequence[str]) -> list[tuple[str, str, str]]:
    rows = await conn.fetch(
        "SELECT DISTINCT swarm_name, owner_role, owner_id FROM webhook_subscriptions"
        " WHERE subscription_id = ANY($1::text[])",
        list(sub_ids),
    )
    return [(r["swarm_name"], r["owner_role"], r["owner_id"]) for r in rows]


async def _waiting(conn: Any, sub_ids: Sequence[str], pending: PendingLimits) -> Waiting:
    """Locks the owners of `sub_ids`, then counts their pending deliveries."""
    if not sub_ids:
        return Waiting([], pending)
    await _lock_owners(conn, await _owners_of(conn, sub_ids))
    return Waiting(await conn.fetch(_WAITING_SQL, list(sub_ids)), pending)


def _sub_values(sub: Record) -> list[Any]:
    return [encode_value(c, sub.get(c)) for c in SUBSCRIPTION_COLUMNS]


def _assignments(
    table: str, key: str, changes: Record, expect: Record | None = None
) -> tuple[str, list[Any]] | None:
    columns = [
        c for c in changes if c != key and (table != "webhook_subscriptions" or c in UPDATABLE)
    ]
    if not columns:
        return None
    sql = ", ".join(f"{c} = ${i}" for i, c in enumerate(columns, start=2))
    expected = [c for c in (expect or {}) if c in SUBSCRIPTION_COLUMNS]
    first = len(columns) + 2
    condition = "".join(f" AND {c} = ${i}" for i, c in enumerate(expected, start=first))
    return (
        f"UPDATE {table} SET {sql} WHERE {key} = $1{condition}",
        [
            changes[key],
            *(encode_value(c, changes[c]) for c in columns),
            *(encode_value(c, (expect or {})[c]) for c in expected),
        ],
    )


class PostgresWebhookStore(WebhookStore):
    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 4) -> None:
        self._dsn = normalize_dsn(database_url)
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None
        self._subs = SubscriptionCache()

    async def start(self) -> None:
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
        if await missing_tables(conn, TABLES):
            await ensure_schema(conn)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                async with asyncio.timeout(10):
                    await pool.close()
            except Exception:  # noqa: BLE001 - closing goes on
                pool.terminate()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        """A pooled connection. PostgreSQL out of reach (down, restarting, its connections
        dropped) while it is used is the stores' StoreUnavailableError (a 503 with
        Retry-After), as for the task store (`mail.store.pg_unreachable`), not the driver's
        error (a 500)."""
        if self._pool is None:
            raise RuntimeError("the PostgreSQL webhook store is not started")
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except Exception as exc:
            if isinstance(exc, StoreUnavailableError) or not is_transient_error(exc):
                raise
            raise StoreUnavailableError(
                f"the database of the webhooks cannot be reached now ({refusal_reason(exc)}); "
                "try again later"
            ) from exc

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

        def where(columns: Sequence[str]) -> tuple[str, list[Any]]:
            names = ("swarm_name", *columns)
            text = " AND ".join(f"{c} = ${i}" for i, c in enumerate(names, start=1))
            return text, [encode_value(c, sub[c]) for c in names]

        async with self._conn() as conn, conn.transaction():
            await _lock_owners(conn, [(sub["swarm_name"], sub["owner_role"], sub["owner_id"])])
            if same:
                text, args = where(same)
                row = await conn.fetchrow(
                    f"SELECT * FROM webhook_subscriptions WHERE {text} LIMIT 1", *args
                )
                if row is not None:
                    changes = {c: sub[c] for c in refresh}
                    changes.update(updated_at=now, subscription_id=row["subscription_id"])
                    update = _assignments("webhook_subscriptions", "subscription_id", changes)
                    assert update is not None
                    await conn.execute(update[0], *update[1])
                    return {**decode_subscription(row), **changes}
            for bound in bounds:
                text, args = where(bound.columns)
                count = await conn.fetchval(
                    f"SELECT count(*) FROM webhook_subscriptions WHERE {text}"
                    f" AND (expires_at IS NULL OR expires_at >= ${len(args) + 1})",
                    *args,
                    now,
                )
                if count >= bound.limit:
                    raise bound.refusal(count)
            await conn.execute(_INSERT_SUBSCRIPTION, *_sub_values(sub))
        return sub

    async def get_subscription(self, subscription_id: str) -> Record | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "SELECT * FROM webhook_subscriptions WHERE subscription_id = $1", subscription_id
            )
        return decode_subscription(row) if row is not None else None

    async def list_subscriptions(
        self,
        swarm_name: str,
        *,
        owner: tuple[str, str] | None = None,
        kinds: Sequence[str] | None = None,
        task_id: str | None = None,
    ) -> list[Record]:
        where, args = ["swarm_name = $1"], [swarm_name]
        if owner is not None:
            where.append(f"owner_role = ${len(args) + 1} AND owner_id = ${len(args) + 2}")
            args.extend(owner)
        if kinds is not None:
            where.append(f"kind = ANY(${len(args) + 1}::text[])")
            args.append(list(kinds))  # type: ignore[arg-type]
        if task_id is not None:
            where.append(f"task_id = ${len(args) + 1}")
            args.append(task_id)
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT * FROM webhook_subscriptions WHERE {' AND '.join(where)}"
                " ORDER BY created_at, subscription_id",
                *args,
            )
        return [decode_subscription(r) for r in rows]

    async def update_subscription(
        self, subscription_id: str, changes: Record, *, expect: Record | None = None
    ) -> Record | None:
        changes = {"updated_at": time.time(), **changes}  # the fan-out cache's version
        update = _assignments(
            "webhook_subscriptions",
            "subscription_id",
            {**changes, "subscription_id": subscription_id},
            expect,
        )
        async with self._conn() as conn:
            if update is not None:
                status = await conn.execute(update[0], *update[1])
                if expect and status.endswith(" 0"):
                    return None
            row = await conn.fetchrow(
                "SELECT * FROM webhook_subscriptions WHERE subscription_id = $1", subscription_id
            )
        return decode_subscription(row) if row is not None else None

    async def delete_subscription(self, subscription_id: str) -> bool:
        async with self._conn() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT delivery_id FROM"
                " webhook_deliveries WHERE subscription_id = $1)",
                subscription_id,
            )
            await conn.execute(
                "DELETE FROM webhook_deliveries WHERE subscription_id = $1", subscription_id
            )
            status = await conn.execute(
                "DELETE FROM webhook_subscriptions WHERE subscription_id = $1", subscription_id
            )
        return bool(status.endswith(" 1"))

    # -- outbox and deliveries ------------------------------------------------------------
    async def add_events(self, events: Sequence[Record]) -> None:
        async with self._conn() as conn:
            await conn.executemany(_INSERT_EVENT, [[e[c] for c in EVENT_COLUMNS] for e in events])

    async def fan_out(
        self, swarm_name: str, now: float, limit: int, pending: PendingLimits, *, wait: bool = False
    ) -> int:
        sql = _FAN_OUT_EVENTS_SQL if wait else _FAN_OUT_EVENTS_SQL + " SKIP LOCKED"
        async with self._conn() as conn, conn.transaction():
            events = [dict(r) for r in await conn.fetch(sql, swarm_name, limit)]
            if not events:
                return 0
            where = "swarm_name = $1 AND active AND kind = ANY($2::text[])"
            version = tuple(
                await conn.fetchrow(
                    f"SELECT count(*), max(updated_at) FROM webhook_subscriptions WHERE {where}",
                    swarm_name,
                    list(FAN_OUT_KINDS),
                )
            )
            index = self._subs.get(swarm_name, version)
            if index is None:
                subs = [
                    decode_subscription(r)
                    for r in await conn.fetch(
                        f"SELECT * FROM webhook_subscriptions WHERE {where}"
                        " ORDER BY created_at, subscription_id",
                        swarm_name,
                        list(FAN_OUT_KINDS),
                    )
                ]
                index = self._subs.put(swarm_name, version, subs)
            matched = [s["subscription_id"] for s in index.matching(events)]
            planned = plan_fan_out(events, index, await _waiting(conn, matched, pending), now)
            if planned:
                await conn.executemany(
                    _INSERT_DELIVERY, [[d[c] for c in DELIVERY_COLUMNS] for d in planned]
                )
            await conn.execute(
                "DELETE FROM webhook_events WHERE event_id = ANY($1::text[])",
                [e["event_id"] for e in events],
            )
        return len(planned)

    async def add_deliveries(
        self, deliveries: Sequence[Record], pending: PendingLimits, *, refuse: bool = False
    ) -> None:
        async with self._conn() as conn, conn.transaction():
            ids = sorted({d["subscription_id"] for d in deliveries})
            booked = (await _waiting(conn, ids, pending)).book(deliveries, refuse=refuse)
            await conn.executemany(
                _INSERT_DELIVERY, [[d[c] for c in DELIVERY_COLUMNS] for d in booked]
            )

    async def claim(
        self, swarm_name: str, now: float, limits: ClaimLimits, owner: str, lease_until: float
    ) -> list[Record]:
        async with self._conn() as conn, conn.transaction():
            rows: list[Record] = []
            left_out: list[Owner] | None = limits.saturated_owners()
            while left_out is not None:
                found = await conn.fetch(
                    _CLAIM_SQL,
                    swarm_name,
                    now,
                    limits.saturated(),
                    [f"{role}\x1f{owner_id}" for role, owner_id in left_out],
                    limits.window,
                )
                rows.extend(dict(r) for r in found)
                left_out = limits.look_past(rows, len(found), left_out)
            candidates = rank_by_owner(rows)
            chosen = limits.choose(candidates)
            if not chosen:
                return []
            await conn.execute(
                "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2"
                " WHERE delivery_id = ANY($3::text[])",
                owner,
                lease_until,
                chosen,
            )
        picked = set(chosen)
        claimed = []
        for row in candidates:
            if row["delivery_id"] in picked:
                row["lease_owner"], row["lease_until"] = owner, lease_until
                row["push_auth"] = decode_auth(row["push_auth"])
                claimed.append(row)
        return claimed

    async def finish_many(self, finished: Sequence[Finished]) -> None:
        async with self._conn() as conn, conn.transaction():
            for attempt, delivery, subscription in finished:
                await conn.execute(_INSERT_ATTEMPT, *(attempt.get(c) for c in ATTEMPT_COLUMNS))
                if attempt["attempt"] > MAX_ATTEMPTS_KEPT:
                    await conn.execute(
                        "DELETE FROM webhook_attempts WHERE delivery_id = $1 AND attempt <= $2",
                        attempt["delivery_id"],
                        attempt["attempt"] - MAX_ATTEMPTS_KEPT,
                    )
                update = _assignments(
                    "webhook_deliveries",
                    "delivery_id",
                    {**delivery, "lease_owner": None, "lease_until": None},
                )
                if update is not None:
                    await conn.execute(update[0], *update[1])
                if subscription is not None:
                    sub_update = _assignments(
                        "webhook_subscriptions", "subscription_id", subscription
                    )
                    if sub_update is not None:
                        await conn.execute(sub_update[0], *sub_update[1])

    async def _with_attempts(self, conn: Any, rows: list[Any]) -> list[Record]:
        ids = [r["delivery_id"] for r in rows]
        logs: dict[str, list[Record]] = {i: [] for i in ids}
        if ids:
            for row in await conn.fetch(
                "SELECT * FROM webhook_attempts WHERE delivery_id = ANY($1::text[])"
                " ORDER BY delivery_id, attempt",
                ids,
            ):
                logs[row["delivery_id"]].append({c: row[c] for c in ATTEMPT_COLUMNS})
        return [
            {**{c: r[c] for c in DELIVERY_COLUMNS}, "attempts_log": logs[r["delivery_id"]]}
            for r in rows
        ]

    async def get_delivery(self, delivery_id: str) -> Record | None:
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT * FROM webhook_deliveries WHERE delivery_id = $1", delivery_id
            )
            found = await self._with_attempts(conn, rows)
        return found[0] if found else None

    async def list_deliveries(
        self,
        subscription_id: str,
        *,
        status: str | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
    ) -> list[Record]:
        where, args = ["subscription_id = $1"], [subscription_id]
        if status is not None:
            where.append(f"status = ${len(args) + 1}")
            args.append(status)
        if before is not None:
            n = len(args)
            where.append(f"(created_at, delivery_id) < (${n + 1}, ${n + 2})")
            args.extend([before[0], before[1]])  # type: ignore[list-item]
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT * FROM webhook_deliveries WHERE {' AND '.join(where)}"
                f" ORDER BY created_at DESC, delivery_id DESC LIMIT ${len(args) + 1}",
                *args,
                limit,
            )
            return await self._with_attempts(conn, list(rows))

    async def retry(self, delivery_id: str, now: float, pending: PendingLimits) -> Record | None:
        async with self._conn() as conn, conn.transaction():
            found = await conn.fetchrow(
                "SELECT subscription_id, status FROM webhook_deliveries WHERE delivery_id = $1",
                delivery_id,
            )
            if found is None:
                return None
            if found["status"] != "pending":
                sub_id = found["subscription_id"]
                why = (await _waiting(conn, [sub_id], pending)).admit(sub_id)
                if why is not None:
                    raise OverQuota(why)
            row = await conn.fetchrow(
                "UPDATE webhook_deliveries SET status = 'pending', retry_index = 0,"
                " next_attempt_at = $2, lease_owner = NULL, lease_until = NULL,"
                " updated_at = $2, finished_at = NULL WHERE delivery_id = $1 RETURNING *",
                delivery_id,
                now,
            )
        return {c: row[c] for c in DELIVERY_COLUMNS} if row is not None else None

    async def pending_count(self, swarm_name: str) -> int:
        async with self._conn() as conn:
            value = await conn.fetchval(
                "SELECT count(*) FROM webhook_deliveries WHERE swarm_name = $1"
                " AND status = 'pending'",
                swarm_name,
            )
        return int(value)

    async def release_leases(self, swarm_name: str) -> int:
        # Other servers may hold leases on these tables: only expired ones are theirs to
        # lose, which claiming already handles. Nothing to do for PostgreSQL.
        return 0

    async def cleanup(self, now: float, retention: float) -> int:
        removed = 0
        async with self._conn() as conn, conn.transaction():
            expired = [
                r["subscription_id"]
                for r in await conn.fetch(
                    "SELECT subscription_id FROM webhook_subscriptions"
                    " WHERE expires_at IS NOT NULL AND expires_at < $1",
                    now,
                )
            ]
            if expired:
                await conn.execute(
                    "DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT delivery_id FROM"
                    " webhook_deliveries WHERE subscription_id = ANY($1::text[]))",
                    expired,
                )
                await conn.execute(
                    "DELETE FROM webhook_deliveries WHERE subscription_id = ANY($1::text[])",
                    expired,
                )
                await conn.execute(
                    "DELETE FROM webhook_subscriptions WHERE subscription_id = ANY($1::text[])",
                    expired,
                )
                removed += len(expired)
            cutoff = now - retention
            await conn.execute(
                "DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT delivery_id FROM"
                " webhook_deliveries WHERE finished_at IS NOT NULL AND finished_at < $1)",
                cutoff,
            )
            status = await conn.execute(
                "DELETE FROM webhook_deliveries WHERE finished_at IS NOT NULL AND finished_at < $1",
                cutoff,
            )
            removed += int(status.rsplit(" ", 1)[-1] or 0)
        return removed
