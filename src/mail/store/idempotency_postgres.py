"""PostgreSQL IdempotencyStore (asyncpg): the `idempotency_keys` table, shared by every
server and front end on the database (cluster mode: a retry may reach another front end).

Statements run directly on a small pool of their own, each committed before it returns
(never through the task store's write-behind buffer). The table is created on start when
missing (``CREATE TABLE IF NOT EXISTS``, under the schema lock the task store uses).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

from mail.store.base import InstanceKey, StoreUnavailableError
from mail.store.idempotency import (
    IdempotencyStore,
    KeyRecord,
    load_context,
    take_row,
)
from mail.store.idempotency_schema import POSTGRES_DDL, TABLE
from mail.store.pg_unreachable import unavailable_when_unreachable
from mail.store.postgres_schema import (
    create_unless_forbidden,
    normalize_dsn,
    open_pool,
    redact_dsn,
)

logger = logging.getLogger("mail.store.idempotency")

_reachable = unavailable_when_unreachable("the idempotency keys")

_SCOPE = "swarm_name = $1 AND caller_role = $2 AND caller_id = $3"

_TAKE = f"""
    INSERT INTO {TABLE} AS k (swarm_name, caller_role, caller_id, idem_key, fingerprint,
                              subject, context, holder, created_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (swarm_name, caller_role, caller_id, idem_key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, subject = EXCLUDED.subject,
        context = EXCLUDED.context, holder = EXCLUDED.holder, status = NULL,
        content_type = NULL, body = NULL, created_at = EXCLUDED.created_at,
        expires_at = EXCLUDED.expires_at
    WHERE k.expires_at <= EXCLUDED.created_at
       OR ($11::boolean AND k.status IS NULL AND k.fingerprint = EXCLUDED.fingerprint
           AND ($12::double precision IS NULL OR k.created_at = $12::double precision))
    RETURNING 1
"""
_GET = f"SELECT * FROM {TABLE} WHERE {_SCOPE} AND idem_key = $4 AND expires_at > $5"
_FINISH = f"""
    UPDATE {TABLE} SET status = $5, content_type = $6, body = $7
    WHERE {_SCOPE} AND idem_key = $4
"""
_RELEASE = f"DELETE FROM {TABLE} WHERE {_SCOPE} AND idem_key = $4"
_COUNT = f"SELECT count(*) FROM {TABLE} WHERE {_SCOPE} AND expires_at > $4"
_PURGE = f"DELETE FROM {TABLE} WHERE expires_at <= $1"
_PURGE_SCOPE = f"DELETE FROM {TABLE} WHERE {_SCOPE} AND expires_at <= $4"
# Answered keys, oldest first (`_EVICT` once the task store's `tasks` table is on the
# database, as with every server: never the key of a task still running, since a stream
# dropped while its task runs is answered, `STREAMED_OUTCOME`, and its repeat must attach to
# that task, not start a second one).
_EVICT_ANSWERED = f"""
    DELETE FROM {TABLE} WHERE {_SCOPE} AND idem_key IN (
        SELECT idem_key FROM {TABLE} WHERE {_SCOPE} AND status IS NOT NULL
        ORDER BY created_at LIMIT $4)
"""
_HAS_TASKS = "SELECT to_regclass('tasks') IS NOT NULL"
_EVICT = f"""
    DELETE FROM {TABLE} WHERE {_SCOPE} AND idem_key IN (
        SELECT k.idem_key FROM {TABLE} AS k
        WHERE k.swarm_name = $1 AND k.caller_role = $2 AND k.caller_id = $3
          AND k.status IS NOT NULL
          AND (k.subject IS NULL OR NOT EXISTS (
              SELECT 1 FROM tasks AS t WHERE t.task_id = k.subject AND t.swarm_name = $1
                 AND t.caller_role = $2 AND t.caller_id = $3 AND t.is_running))
        ORDER BY k.created_at LIMIT $4)
"""
# The task store's schema lock (postgres_schema): concurrent DDL on one database waits.
_SCHEMA_LOCK_ID = 0x4D41494C


def _scope(scope: InstanceKey) -> tuple[str, str, str]:
    return (scope.swarm_name, scope.caller_role, scope.caller_id)


def _record(row: Any) -> KeyRecord:
    body = row["body"]
    return KeyRecord(
        fingerprint=row["fingerprint"],
        created_at=float(row["created_at"]),
        expires_at=float(row["expires_at"]),
        subject=row["subject"],
        context=load_context(row["context"]),
        holder=row["holder"],
        status=row["status"],
        content_type=row["content_type"],
        body=None if body is None else bytes(body),
    )


def _count(status: str) -> int:
    try:
        return int(status.rsplit(" ", 1)[-1])
    except (ValueError, AttributeError):
        return 0


async def ensure_table(conn: Any) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK_ID)
        await conn.execute(POSTGRES_DDL)


async def _prepare(conn: Any) -> None:
    await create_unless_forbidden(conn, ensure_table, (TABLE,))


class PostgresIdempotencyStore(IdempotencyStore):
    backend = "postgres"

    def __init__(
        self, database_url: str, *, min_size: int = 1, max_size: int = 4, timeout: float = 30.0
    ) -> None:
        self._dsn = normalize_dsn(database_url)
        self._min_size = min_size
        self._max_size = max_size
        self._timeout = timeout
        self._pool: asyncpg.Pool | None = None
        self._with_tasks = False  # the task store's tables are on this database (`_EVICT`)

    async def start(self) -> None:
        if self._pool is None:
            self._pool = await open_pool(
                self._dsn,
                _prepare,
                purpose=" for idempotency keys",
                min_size=self._min_size,
                max_size=self._max_size,
                command_timeout=self._timeout,
                server_settings={"application_name": "mail-idempotency"},
            )
            logger.info("idempotency keys in PostgreSQL (%s)", redact_dsn(self._dsn))

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                async with asyncio.timeout(10):
                    await pool.close()
            except (TimeoutError, OSError, asyncpg.InterfaceError):
                pool.terminate()

    def _require(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreUnavailableError("the idempotency store is not started")
        return self._pool

    @_reachable
    async def get(self, scope: InstanceKey, key: str, now: float) -> KeyRecord | None:
        row = await self._require().fetchrow(_GET, *_scope(scope), key, now)
        return None if row is None else _record(row)

    @_reachable
    async def take(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        pool = self._require()
        args = (*take_row(_scope(scope), key, record), replace, over)
        for _ in range(3):
            # One statement (one round trip, committed on its own) when the key is free.
            if await pool.fetchval(_TAKE, *args) is not None:
                return None
            row = await pool.fetchrow(_GET, *_scope(scope), key, record.created_at)
            if row is not None:
                return _record(row)
            # The holder was released or expired between the two statements: try again.
        return record

    @_reachable
    async def finish(
        self, scope: InstanceKey, key: str, status: int, content_type: str | None, body: bytes
    ) -> None:
        await self._require().execute(
            _FINISH, *_scope(scope), key, status, content_type, bytes(body)
        )

    @_reachable
    async def finish_many(
        self, outcomes: list[tuple[InstanceKey, str, int, str | None, bytes]]
    ) -> None:
        rows = [
            (*_scope(scope), key, status, content_type, bytes(body))
            for scope, key, status, content_type, body in outcomes
        ]
        await self._require().executemany(_FINISH, rows)

    @_reachable
    async def release(self, scope: InstanceKey, key: str) -> None:
        await self._require().execute(_RELEASE, *_scope(scope), key)

    @_reachable
    async def count(self, scope: InstanceKey, now: float) -> int:
        return int(await self._require().fetchval(_COUNT, *_scope(scope), now))

    @_reachable
    async def purge(self, now: float, scope: InstanceKey | None = None) -> int:
        if scope is None:
            return _count(await self._require().execute(_PURGE, now))
        return _count(await self._require().execute(_PURGE_SCOPE, *_scope(scope), now))

    @_reachable
    async def evict_finished(self, scope: InstanceKey, count: int) -> int:
        pool = self._require()
        if not self._with_tasks:
            self._with_tasks = bool(await pool.fetchval(_HAS_TASKS))
        evict = _EVICT if self._with_tasks else _EVICT_ANSWERED
        return _count(await pool.execute(evict, *_scope(scope), max(count, 0)))
