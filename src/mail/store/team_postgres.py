"""PostgreSQL TeamStore (`team_sql`, on asyncpg): here what PostgreSQL spells its own way,
its four tables (created on start when missing: ``CREATE TABLE IF NOT EXISTS``), sizes and
the prune."""

from __future__ import annotations

import datetime
from collections.abc import Collection

import asyncpg

from mail.store.base import InstanceKey, StoreUnavailableError
from mail.store.lifecycle_postgres import _FINISHED
from mail.store.postgres import is_transient_error
from mail.store.postgres_schema import create_unless_forbidden, normalize_dsn, open_pool
from mail.store.sql import PostgresSql
from mail.store.team_base import TEAM_PRUNE_BATCH, cutoff_text, key_clause
from mail.store.team_base import key_tuple as _k
from mail.store.team_sql import SqlTeamStore

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


class PostgresTeamStore(SqlTeamStore):
    _EMPTY_DATA = "''::bytea"
    _THREAD_ORDER = "created_at"

    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 5) -> None:
        self._dsn = normalize_dsn(database_url)
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self.sql = PostgresSql(lambda: self.pool)
        self._init_writes(is_transient_error)

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

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL team store is not started")
        return self._pool

    def _created_at(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

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
