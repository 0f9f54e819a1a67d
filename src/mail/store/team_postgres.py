"""PostgreSQL TeamStore (`team_base`, on asyncpg): here what PostgreSQL spells its own way,
and its four tables (created on start when missing: ``CREATE TABLE IF NOT EXISTS``)."""

from __future__ import annotations

import datetime

import asyncpg

from mail.store.postgres import is_transient_error
from mail.store.postgres_schema import create_unless_forbidden, normalize_dsn, open_pool
from mail.store.records import StoreUnavailableError
from mail.store.sql import PostgresSql
from mail.store.team_base import TeamStore

_KEY = "swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, caller_id TEXT NOT NULL"
TEAM_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS team_threads (
    {_KEY},
    thread_id TEXT NOT NULL,
    record JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (swarm_name, caller_role, caller_id, thread_id)
);
CREATE TABLE IF NOT EXISTS team_posts (
    seq BIGSERIAL PRIMARY KEY,
    {_KEY},
    thread_id TEXT NOT NULL,
    record JSONB NOT NULL
);
CREATE INDEX IF NOT EXISTS team_posts_thread
    ON team_posts (swarm_name, caller_role, caller_id, thread_id, seq);
CREATE TABLE IF NOT EXISTS team_inbox (
    seq BIGSERIAL PRIMARY KEY,
    {_KEY},
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
    {_KEY},
    attachment_id TEXT NOT NULL,
    record JSONB NOT NULL,
    data BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (swarm_name, caller_role, caller_id, attachment_id)
);
"""

TEAM_TABLES: tuple[str, ...] = ("team_threads", "team_posts", "team_inbox", "team_attachments")


async def create_team_tables(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_advisory_lock(7415001)")
    try:
        await conn.execute(TEAM_SCHEMA)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(7415001)")


async def _create_tables(conn: asyncpg.Connection) -> None:
    await create_unless_forbidden(conn, create_team_tables, TEAM_TABLES)


class PostgresTeamStore(TeamStore):
    postgres = True
    _EMPTY_DATA = "''::bytea"
    _THREAD_ORDER = "created_at"
    _ROW_ID = "ctid"
    _CUTOFF_TIME = "?1::text::timestamptz"
    _THREAD_CREATED = "''"

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
