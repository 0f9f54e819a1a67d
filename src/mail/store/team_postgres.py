"""PostgreSQL TeamStore (asyncpg): threads, posts, inboxes and attachments in four tables.

A write returns once it is committed (not through the task store's write-behind buffer), so
a tool call that reported success is on disk: a kill -9 right after it loses nothing.
Writes go through `RetryingWrites`: while PostgreSQL cannot be reached they stay queued in
order and land once it can, and the store reports itself degraded meanwhile. The tables
are created on start when missing (``CREATE TABLE IF NOT EXISTS``).
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any

import asyncpg

from mail.store.base import InstanceKey, StoreUnavailableError
from mail.store.lifecycle_postgres import _FINISHED
from mail.store.postgres import is_transient_error
from mail.store.postgres_schema import create_unless_forbidden, normalize_dsn, open_pool
from mail.store.retrying import RetryingWrites
from mail.store.team_base import (
    TEAM_PRUNE_BATCH,
    InboxQuery,
    Record,
    TeamStore,
    cutoff_text,
    inbox_rows,
    key_clause,
    trim_sql,
    unread_from_rows,
)
from mail.store.team_base import dump_record as _dump
from mail.store.team_base import entry_from_row as _entry
from mail.store.team_base import key_tuple as _k

logger = logging.getLogger("mail.store.team")

TEAM_SCHEMA = """
CREATE TABLE IF NOT EXISTS team_threads (
    swarm_name TEXT NOT NULL,
    caller_role TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    record JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (swarm_name, caller_role, caller_id, thread_id)
);
CREATE TABLE IF NOT EXISTS team_posts (
    seq BIGSERIAL PRIMARY KEY,
    swarm_name TEXT NOT NULL,
    caller_role TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    record JSONB NOT NULL
);
CREATE INDEX IF NOT EXISTS team_posts_thread
    ON team_posts (swarm_name, caller_role, caller_id, thread_id, seq);
CREATE TABLE IF NOT EXISTS team_inbox (
    seq BIGSERIAL PRIMARY KEY,
    swarm_name TEXT NOT NULL,
    caller_role TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    thread_id TEXT,
    ts TEXT NOT NULL,
    is_read BOOLEAN NOT NULL DEFAULT FALSE,
    shown BOOLEAN NOT NULL DEFAULT FALSE,
    record JSONB NOT NULL,
    UNIQUE (swarm_name, caller_role, caller_id, agent_name, entry_id)
);
CREATE INDEX IF NOT EXISTS team_inbox_agent
    ON team_inbox (swarm_name, caller_role, caller_id, agent_name, seq);
CREATE TABLE IF NOT EXISTS team_attachments (
    swarm_name TEXT NOT NULL,
    caller_role TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    attachment_id TEXT NOT NULL,
    record JSONB NOT NULL,
    data BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (swarm_name, caller_role, caller_id, attachment_id)
);
"""

TEAM_TABLES: tuple[str, ...] = ("team_threads", "team_posts", "team_inbox", "team_attachments")
_KEY = key_clause("$")

# Posts, inbox entries and attachments name the task they came with ($.task_id). One whose
# task (of the same instance) is kept is kept too, whatever its age: a task that still runs
# or waits (a breakpoint, a review) may need it, and one finished (or changed) since the
# cutoff is read with it (an upload, its thread, its inbox) until the task prune removes it.
_OF_TASKS = ("team_posts", "team_inbox", "team_attachments")
_TASK_LIVE = (
    " AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.swarm_name = {table}.swarm_name"
    " AND t.caller_role = {table}.caller_role AND t.caller_id = {table}.caller_id"
    " AND t.task_id = {table}.record->>'task_id'"
    " AND NOT (t.updated_at < $1::text::timestamptz AND " + _FINISHED + "))"
)

# Tables pruned in `seq` order (see `_prune_by_seq`).
_BY_SEQ = ("team_posts", "team_inbox")

# What is older than the cutoff ($1: as text for the records' times, as a timestamp for
# the columns), per table; threads last, once their posts are gone.
_EXPIRED: tuple[tuple[str, str, bool], ...] = (
    ("team_posts", "record->>'timestamp' < $1", False),
    ("team_inbox", "ts < $1", False),
    ("team_attachments", "created_at < $1", True),
    (
        "team_threads",
        "COALESCE(record->>'updated_at', '') < $1 AND NOT EXISTS"
        " (SELECT 1 FROM team_posts p WHERE p.swarm_name = team_threads.swarm_name"
        " AND p.caller_role = team_threads.caller_role AND p.caller_id = team_threads.caller_id"
        " AND p.thread_id = team_threads.thread_id)",
        False,
    ),
)
_SIZES = (
    f"SELECT (SELECT COALESCE(SUM(octet_length(record::text)), 0) FROM team_threads WHERE {_KEY})"
    f" + (SELECT COALESCE(SUM(octet_length(record::text)), 0) FROM team_posts WHERE {_KEY})"
    f" + (SELECT COALESCE(SUM(octet_length(record::text)), 0) FROM team_inbox WHERE {_KEY})"
    " + (SELECT COALESCE(SUM(octet_length(data) + octet_length(record::text)), 0)"
    f" FROM team_attachments WHERE {_KEY})"
)


async def create_team_tables(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_advisory_lock(7415001)")
    try:
        await conn.execute(TEAM_SCHEMA)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(7415001)")


async def _create_tables(conn: asyncpg.Connection) -> None:
    await create_unless_forbidden(conn, create_team_tables, TEAM_TABLES)


Write = Callable[[Any], Awaitable[Any]]  # given a connection inside a transaction


class PostgresTeamStore(TeamStore):
    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 5) -> None:
        self._dsn = normalize_dsn(database_url)
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self.writes: RetryingWrites[Write] = RetryingWrites(
            self._apply, is_transient=is_transient_error, name="mail.store.team"
        )

    async def start(self) -> None:
        if self._pool is None:
            self._pool = await open_pool(
                self._dsn,
                _create_tables,
                purpose=" for team messaging",
                min_size=self._min_size,
                max_size=self._max_size,
                server_settings={"application_name": "mail-server-team"},
            )
            self.writes.start()

    async def close(self) -> None:
        if self.writes.running:
            await self.writes.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _apply(self, writes: list[Write]) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            for write in writes:
                await write(conn)

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL team store is not started")
        return self._pool

    # -- threads ---------------------------------------------------------------------
    async def save_thread(self, key: InstanceKey, thread: Record) -> None:
        args = (*_k(key), thread["thread_id"], _dump(thread))
        await self.writes.write(
            lambda conn: conn.execute(
                "INSERT INTO team_threads (swarm_name, caller_role, caller_id, thread_id, record)"
                " VALUES ($1, $2, $3, $4, $5::jsonb) ON CONFLICT"
                " (swarm_name, caller_role, caller_id, thread_id) DO UPDATE SET record = $5::jsonb",
                *args,
            )
        )

    async def get_thread(self, key: InstanceKey, thread_id: str) -> Record | None:
        row = await self.pool.fetchrow(
            f"SELECT record FROM team_threads WHERE {_KEY} AND thread_id = $4", *_k(key), thread_id
        )
        return json.loads(row["record"]) if row else None

    async def list_threads(self, key: InstanceKey | None) -> list[tuple[InstanceKey, Record]]:
        if key is None:
            rows = await self.pool.fetch(
                "SELECT swarm_name, caller_role, caller_id, record FROM team_threads"
                " ORDER BY created_at"
            )
        else:
            rows = await self.pool.fetch(
                "SELECT swarm_name, caller_role, caller_id, record FROM team_threads"
                f" WHERE {_KEY} ORDER BY created_at",
                *_k(key),
            )
        return [
            (
                InstanceKey(r["swarm_name"], r["caller_role"], r["caller_id"]),
                json.loads(r["record"]),
            )
            for r in rows
        ]

    async def count_threads(self, key: InstanceKey) -> int:
        count = await self.pool.fetchval(
            f"SELECT COUNT(*) FROM team_threads WHERE {_KEY}", *_k(key)
        )
        return int(count or 0)

    async def add_post(self, key: InstanceKey, post: Record) -> None:
        args = (*_k(key), post["thread_id"])
        record = _dump(post)
        limit = self.max_posts_per_thread

        async def add(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO team_posts (swarm_name, caller_role, caller_id, thread_id, record)"
                " VALUES ($1, $2, $3, $4, $5::jsonb)",
                *args,
                record,
            )
            if limit is not None:
                # Keep the newest posts of the thread (the same rule as the memory store).
                await conn.execute(trim_sql("team_posts", "thread_id", "$"), *args, limit)

        await self.writes.write(add)

    async def thread_posts(
        self, key: InstanceKey, thread_id: str, limit: int | None = None
    ) -> list[Record]:
        rows = await self.pool.fetch(
            f"SELECT record FROM team_posts WHERE {_KEY} AND thread_id = $4"
            " ORDER BY seq DESC LIMIT $5",
            *_k(key),
            thread_id,
            limit,
        )
        return [json.loads(r["record"]) for r in reversed(rows)]

    # -- inboxes ---------------------------------------------------------------------
    async def add_inbox_entries(self, key: InstanceKey, entries: Iterable[Record]) -> None:
        rows = inbox_rows(key, entries)
        if not rows:
            return
        limit = self.max_inbox_entries

        async def add(conn: Any) -> None:
            await conn.executemany(
                "INSERT INTO team_inbox (swarm_name, caller_role, caller_id, agent_name,"
                " entry_id, thread_id, ts, is_read, shown, record)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)"
                " ON CONFLICT DO NOTHING",
                rows,
            )
            if limit is not None:
                for agent in sorted({row[3] for row in rows}):
                    await conn.execute(
                        trim_sql("team_inbox", "agent_name", "$"), *_k(key), agent, limit
                    )

        await self.writes.write(add)

    async def select_inbox(self, key: InstanceKey, agent: str, query: InboxQuery) -> list[Record]:
        order = "ASC" if query.oldest_first else "DESC"
        rows = await self.pool.fetch(
            "SELECT record, is_read, shown FROM team_inbox"
            f" WHERE {_KEY} AND agent_name = $4"
            " AND ($5::text IS NULL OR thread_id = $5)"
            " AND ($6::text IS NULL OR ts > $6)"
            " AND (NOT $7 OR NOT shown)"
            " AND (NOT $9 OR NOT is_read)"
            " AND ($10::text IS NULL OR entry_id = $10)"
            f" ORDER BY seq {order} LIMIT $8",
            *_k(key),
            agent,
            query.thread_id,
            query.since,
            query.unshown_only,
            query.limit,
            query.unread_only,
            query.entry_id,
        )
        return [_entry(r) for r in rows]

    async def mark(
        self, key: InstanceKey, agent: str, entry_ids: Iterable[str], *, field: str
    ) -> None:
        column = {"read": "is_read", "shown": "shown"}[field]
        args = (*_k(key), agent, list(entry_ids))
        await self.writes.write(
            lambda conn: conn.execute(
                f"UPDATE team_inbox SET {column} = TRUE"
                f" WHERE {_KEY} AND agent_name = $4 AND entry_id = ANY($5::text[])",
                *args,
            )
        )

    async def unread_counts(
        self, key: InstanceKey, thread_id: str | None = None
    ) -> dict[str, dict[str, int]]:
        rows = await self.pool.fetch(
            "SELECT agent_name, COALESCE(thread_id, 'direct') AS place, COUNT(*) AS n"
            f" FROM team_inbox WHERE {_KEY} AND NOT is_read"
            " AND ($4::text IS NULL OR thread_id = $4)"
            " GROUP BY agent_name, place",
            *_k(key),
            thread_id,
        )
        return unread_from_rows(rows)

    # -- attachments -----------------------------------------------------------------
    async def put_attachment(self, key: InstanceKey, record: Record, data: bytes) -> None:
        args = (*_k(key), record["attachment_id"], _dump(record), data)
        await self.writes.write_now(  # the bytes do not wait in memory
            lambda conn: conn.execute(
                "INSERT INTO team_attachments (swarm_name, caller_role, caller_id,"
                " attachment_id, record, data) VALUES ($1, $2, $3, $4, $5::jsonb, $6)"
                # (replacing: a keyed request's retry stores its uploads under their ids)
                " ON CONFLICT (swarm_name, caller_role, caller_id, attachment_id) DO UPDATE"
                " SET record = EXCLUDED.record, data = EXCLUDED.data,"
                " created_at = EXCLUDED.created_at",
                *args,
            )
        )

    async def attachment_bytes(self, key: InstanceKey) -> int:
        total = await self.pool.fetchval(
            f"SELECT COALESCE(SUM(octet_length(data)), 0) FROM team_attachments WHERE {_KEY}",
            *_k(key),
        )
        return int(total or 0)

    async def get_attachment(
        self, key: InstanceKey, attachment_id: str, *, with_data: bool = True
    ) -> tuple[Record, bytes] | None:
        column = "data" if with_data else "''::bytea AS data"
        row = await self.pool.fetchrow(
            f"SELECT record, {column} FROM team_attachments WHERE {_KEY} AND attachment_id = $4",
            *_k(key),
            attachment_id,
        )
        if row is None:
            return None
        return json.loads(row["record"]), bytes(row["data"])

    # -- lifecycle -------------------------------------------------------------------
    async def stored_bytes(self, key: InstanceKey) -> int:
        return int(await self.pool.fetchval(_SIZES, *_k(key)) or 0)

    async def prune_before(
        self, cutoff: datetime.datetime, live_tasks: Collection[tuple[InstanceKey, str]] = ()
    ) -> int:
        text = cutoff_text(cutoff)
        removed = 0
        # Without a task table (a team store on its own) no row has a task to wait for.
        with_tasks = await self.pool.fetchval("SELECT to_regclass('tasks') IS NOT NULL")
        for table, condition, by_timestamp in _EXPIRED:
            if with_tasks and table in _OF_TASKS:
                condition += _TASK_LIVE.format(table=table)
            if table in _BY_SEQ:
                removed += await self._prune_by_seq(table, condition, text)
                continue
            while True:  # a batch per transaction: other writes go on in between
                status = await self.pool.execute(
                    f"DELETE FROM {table} WHERE ctid IN"
                    f" (SELECT ctid FROM {table} WHERE {condition} LIMIT {TEAM_PRUNE_BATCH})",
                    cutoff if by_timestamp else text,
                )
                count = int(status.rsplit(" ", 1)[-1]) if status else 0
                removed += count
                if count < TEAM_PRUNE_BATCH:
                    break
        return removed

    async def _prune_by_seq(self, table: str, condition: str, cutoff: str) -> int:
        """`table`'s expired rows in batches that each go on where the last one stopped (by
        `seq`): rows that stay though older than the cutoff (a live task's) are read once
        per prune, not once per batch."""
        removed, after = 0, 0
        while True:  # a batch per transaction: other writes go on in between
            rows = await self.pool.fetch(
                f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} WHERE seq > $2"
                f" AND ({condition}) ORDER BY seq LIMIT {TEAM_PRUNE_BATCH}) RETURNING seq",
                cutoff,
                after,
            )
            removed += len(rows)
            if len(rows) < TEAM_PRUNE_BATCH:
                return removed
            after = max(row["seq"] for row in rows)
