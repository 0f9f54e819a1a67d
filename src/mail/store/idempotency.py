"""Idempotency keys: which request a caller's key stands for, what it started, its outcome.

One :class:`KeyRecord` per caller (`InstanceKey`) and ``Idempotency-Key``: *taken* (written
and committed) before the work it guards starts, with what that work is (``subject``, a task
id, and route data in ``context``), *finished* with the outcome (status, content type, body).
Every write is committed when it returns, so a retry after a kill -9 finds the work. The SQL
is written once and run through `mail.store.sql`'s connections: in the server's SQLite file,
PostgreSQL (shared by a cluster's front ends) or an in-memory SQLite database. A record
expires at ``expires_at`` (epoch seconds); expired ones are absent and deleted by `purge`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mail.store import database_url_from_env, postgres_schema, sqlite_schema
from mail.store.records import IDEMPOTENCY_TABLE as TABLE
from mail.store.records import STREAMED_OUTCOME, InstanceKey, StoreUnavailableError, to_json
from mail.store.schema import IDEMPOTENCY_TABLE
from mail.store.sql import PostgresSql, SqlConn, SqliteConn, run_at_once

logger = logging.getLogger("mail.store.idempotency")


@dataclass(slots=True)
class KeyRecord:
    fingerprint: str
    created_at: float
    expires_at: float
    subject: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    holder: str = ""
    status: int | None = None  # the outcome, once the request finished
    content_type: str | None = None
    body: bytes | None = None

    @property
    def finished(self) -> bool:
        return self.status is not None

    @property
    def streamed(self) -> bool:
        """Its request was answered by a stream that ended (`STREAMED_OUTCOME`)."""
        return self.content_type == STREAMED_OUTCOME


# ------------------------------------------------------------------------------ the SQL

_COLUMNS = (
    "swarm_name, caller_role, caller_id, idem_key, fingerprint, subject, context, holder, "
    "created_at, expires_at"
)
_SCOPE = "swarm_name = ? AND caller_role = ? AND caller_id = ?"
# A new or expired key is (re)written; a live one only by a takeover (`take`).
_TAKE = f"""
    INSERT INTO {TABLE} AS k ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (swarm_name, caller_role, caller_id, idem_key) DO UPDATE SET
        fingerprint = excluded.fingerprint, subject = excluded.subject,
        context = excluded.context, holder = excluded.holder, status = NULL,
        content_type = NULL, body = NULL, created_at = excluded.created_at,
        expires_at = excluded.expires_at
    WHERE k.expires_at <= excluded.created_at
       OR (CAST(? AS BOOLEAN) AND k.status IS NULL AND k.fingerprint = excluded.fingerprint
           AND (CAST(? AS DOUBLE PRECISION) IS NULL OR k.created_at = ?))
"""
_GET = (
    "SELECT fingerprint, created_at, expires_at, subject, context, holder, status, content_type,"
    f" body FROM {TABLE} WHERE {_SCOPE} AND idem_key = ? AND expires_at > ?"
)
_FINISH = (
    f"UPDATE {TABLE} SET status = ?, content_type = ?, body = ? WHERE {_SCOPE} AND idem_key = ?"
)
_RELEASE = f"DELETE FROM {TABLE} WHERE {_SCOPE} AND idem_key = ?"
_COUNT = f"SELECT count(*) FROM {TABLE} WHERE {_SCOPE} AND expires_at > ?"
_PURGE = f"DELETE FROM {TABLE} WHERE expires_at <= ?"
# A caller's oldest finished keys: with an outcome, or naming a task that is not running
# (its answer is the outcome; a dropped stream's key must stay while its task runs on).
_OLDEST_FINISHED = (
    f"SELECT k.idem_key FROM {TABLE} AS k WHERE {_SCOPE} AND {{}} ORDER BY k.created_at LIMIT ?"
)
_FINISHED_WITH_TASKS = """(CASE WHEN k.subject IS NULL THEN k.status IS NOT NULL ELSE NOT EXISTS (
    SELECT 1 FROM tasks AS t WHERE t.task_id = k.subject AND t.swarm_name = ?
       AND t.caller_role = ? AND t.caller_id = ? AND t.is_running) END)"""


def _scope(scope: InstanceKey) -> tuple[str, str, str]:
    return (scope.swarm_name, scope.caller_role, scope.caller_id)


class IdempotencyStore:
    """Key records per (InstanceKey, key); every write is committed when it returns. The
    kinds run the SQL: `_run` one statement, "rows", "one" (a row or None), "count" (rows
    changed) or "many" (`args`: several rows)."""

    # The task store's `tasks` table is beside the keys: a key with a task counts as finished
    # once that task is not running (`Ticket.answered_by_task`).
    knows_tasks = True

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def _run(self, sql: str, args: tuple[Any, ...], how: str) -> Any:
        raise NotImplementedError

    async def _has_tasks(self) -> bool:
        return self.knows_tasks

    async def get(self, scope: InstanceKey, key: str, now: float) -> KeyRecord | None:
        row = await self._run(_GET, (*_scope(scope), key, now), "one")
        if row is None:
            return None
        record = KeyRecord(*row)  # (`_GET` reads its fields, in order)
        context = json.loads(row["context"] or "{}")
        record.context = context if isinstance(context, dict) else {}
        return record

    async def take(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        """Store `record` unless a live record holds `key` (returned; None when stored). With
        `replace`, a live unfinished one of the same fingerprint is overwritten (a takeover),
        and with `over` only if it was created at `over` (no other takeover came first)."""
        args: tuple[Any, ...] = (*_scope(scope), key, record.fingerprint, record.subject)
        args += (to_json(record.context), record.holder, record.created_at, record.expires_at)
        args += (replace, over, over)
        for _ in range(3):
            if await self._run(_TAKE, args, "count"):
                return None
            held = await self.get(scope, key, record.created_at)
            if held is not None:
                return held
        return record

    async def finish(
        self, scope: InstanceKey, key: str, status: int, content_type: str | None, body: bytes
    ) -> None:
        await self._run(_FINISH, (status, content_type, bytes(body), *_scope(scope), key), "count")

    async def release(self, scope: InstanceKey, key: str) -> None:
        await self._run(_RELEASE, (*_scope(scope), key), "count")

    async def count(self, scope: InstanceKey, now: float) -> int:
        return int((await self._run(_COUNT, (*_scope(scope), now), "one"))[0])

    async def purge(self, now: float, scope: InstanceKey | None = None) -> int:
        """Delete expired records (of one caller, or of everyone); returns how many."""
        if scope is None:
            return int(await self._run(_PURGE, (now,), "count"))
        return int(await self._run(f"{_PURGE} AND {_SCOPE}", (now, *_scope(scope)), "count"))

    async def evict_finished(
        self, scope: InstanceKey, count: int, keep: frozenset[str] = frozenset()
    ) -> int:
        """Delete one caller's `count` oldest finished records but those in `keep`."""
        owner, count = _scope(scope), max(count, 0)
        tasks = await self._has_tasks()
        sql = _OLDEST_FINISHED.format(_FINISHED_WITH_TASKS if tasks else "k.status IS NOT NULL")
        rows = await self._run(sql, (*owner, *(owner if tasks else ()), count + len(keep)), "rows")
        gone = [(*owner, row[0]) for row in rows if row[0] not in keep][:count]
        if gone:
            await self._run(_RELEASE, tuple(gone), "many")
        return len(gone)


async def _statement(conn: SqlConn, sql: str, args: Any, how: str) -> Any:
    if how == "many":
        return await conn.executemany(sql, args)
    if how == "count":
        return await conn.execute(sql, *args)
    return await (conn.fetchrow if how == "one" else conn.fetch)(sql, *args)


def _execute(conn: sqlite3.Connection, sql: str, args: Any, how: str) -> Any:
    return run_at_once(_statement(SqliteConn(conn), sql, args, how))


class SqliteIdempotencyStore(IdempotencyStore):
    """The server's SQLite file (the task store's connection and thread): the writes of one
    turn of the event loop are one transaction. In memory (`MemoryIdempotencyStore`) each
    statement runs at once."""

    def __init__(self, path: str | Path) -> None:
        self.db = sqlite_schema.open_database(path)
        self._started = False
        self._writes: list[tuple[str, Any, str, asyncio.Future[Any]]] = []
        self._commits: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True

    async def close(self) -> None:
        if self._writes:
            self._commit()
        await asyncio.gather(*self._commits, return_exceptions=True)
        if self._started:
            self._started = False
            await self.db.release()

    async def _run(self, sql: str, args: tuple[Any, ...], how: str) -> Any:
        if how in ("one", "rows") or self.db.in_memory:
            return await self._call(lambda conn: _execute(conn, sql, args, how), 0)
        future = asyncio.get_running_loop().create_future()
        if not self._writes:
            asyncio.get_running_loop().call_soon(self._commit)
        self._writes.append((sql, args, how, future))
        return await future

    def _commit(self) -> None:
        writes, self._writes = self._writes, []
        if not writes:
            return

        def run(conn: sqlite3.Connection) -> list[Any]:
            with sqlite_schema.transaction(conn):
                return [_execute(conn, sql, args, how) for sql, args, how, _ in writes]

        def committed(task: asyncio.Task[Any]) -> None:
            self._commits.discard(task)
            for index, (*_, future) in enumerate(writes):
                if future.done():
                    continue
                if task.cancelled():
                    future.cancel()
                elif (failed := task.exception()) is not None:
                    future.set_exception(failed)
                else:
                    future.set_result(task.result()[index])

        task = asyncio.get_running_loop().create_task(self._call(run, len(writes)))
        self._commits.add(task)
        task.add_done_callback(committed)

    async def _call(self, fn: Any, pages: int) -> Any:
        try:
            return await self.db.run_small(fn, pages=pages)
        except sqlite3.OperationalError as exc:
            if not self.db.is_open:
                raise
            raise StoreUnavailableError(
                f"the store cannot write ({exc}): the request's Idempotency-Key is not "
                "stored; retry later"
            ) from exc


class MemoryIdempotencyStore(SqliteIdempotencyStore):
    """``--store memory``: an in-memory SQLite database of its own, without the tasks."""

    knows_tasks = False

    def __init__(self) -> None:
        super().__init__(sqlite_schema.MEMORY)


class PostgresIdempotencyStore(IdempotencyStore):
    """PostgreSQL (asyncpg) on a small pool of its own, shared by a cluster's front ends."""

    def __init__(self, database_url: str, *, max_size: int = 4, timeout: float = 30.0) -> None:
        self._dsn = postgres_schema.normalize_dsn(database_url)
        self._max_size = max_size
        self._timeout = timeout
        self._pool: Any = None
        self._sql = PostgresSql(
            lambda: self._pool, "the database of the idempotency keys cannot be reached now"
        )

    async def start(self) -> None:
        async def prepare(conn: Any) -> None:
            await postgres_schema.create_unless_forbidden(conn, (IDEMPOTENCY_TABLE,))

        if self._pool is None:
            self._pool = await postgres_schema.open_pool(
                self._dsn,
                prepare,
                purpose=" for idempotency keys",
                min_size=1,
                max_size=self._max_size,
                command_timeout=self._timeout,
                server_settings={"application_name": "mail-idempotency"},
            )
            logger.info(
                "idempotency keys in PostgreSQL (%s)", postgres_schema.redact_dsn(self._dsn)
            )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        await postgres_schema.close_pool(pool)

    async def _has_tasks(self) -> bool:
        return bool((await self._run("SELECT to_regclass('tasks') IS NOT NULL", (), "one"))[0])

    async def _run(self, sql: str, args: tuple[Any, ...], how: str) -> Any:
        if self._pool is None:
            raise StoreUnavailableError("the idempotency store is not started")
        return await self._sql.run(_statement, sql, args, how)


async def open_key_store(task_store: Any) -> IdempotencyStore:
    """The key store beside a task store: its SQLite file, its PostgreSQL database, or an
    in-memory SQLite database (none, or a `MemoryTaskStore`)."""
    backend = getattr(task_store, "backend", "")
    store: IdempotencyStore = MemoryIdempotencyStore()
    if backend == "sqlite":
        store = SqliteIdempotencyStore(task_store.path)
    elif backend == "postgres" and (url := database_url_from_env()):
        store = PostgresIdempotencyStore(url)
    await store.start()
    return store
