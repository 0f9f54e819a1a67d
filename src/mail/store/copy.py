"""Copy everything a server stored from one database to another (SQLite <-> PostgreSQL)."""

from __future__ import annotations

import datetime as _dt
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from mail.store.sql import PostgresConn, SqlConn, SqliteConn
from mail.store.webhooks_schema import COLUMNS as WEBHOOK_COLUMNS

# table -> ((column, type), ...); type: text | json | bool | time | bytes | int | real (epoch
# seconds, REAL / DOUBLE PRECISION). `order` columns
# give the order rows are read in (and thus the target's new sequence numbers).
_KEY = (("swarm_name", "text"), ("caller_role", "text"), ("caller_id", "text"))
TABLES: tuple[tuple[str, tuple[tuple[str, str], ...], str], ...] = (
    (
        "tasks",
        (
            *_KEY,
            ("task_id", "text"),
            ("task_owner", "text"),
            ("task_contributors", "json"),
            ("remote_swarms", "json"),
            ("is_running", "bool"),
            ("completed", "bool"),
            ("title", "text"),
            ("start_time", "time"),
            ("metadata", "json"),
            ("created_at", "time"),
            ("updated_at", "time"),
        ),
        "start_time",
    ),
    (
        "task_events",
        (
            *_KEY,
            ("task_id", "text"),
            ("event_type", "text"),
            ("event_data", "text"),
            ("event_id", "text"),
            ("created_at", "time"),
        ),
        "seq",
    ),
    (
        "agent_histories",
        (
            *_KEY,
            ("task_id", "text"),
            ("agent_name", "text"),
            ("tool_format", "text"),
            ("history", "json"),
            ("created_at", "time"),
            ("updated_at", "time"),
            ("start", "int"),
        ),
        "task_id, agent_name, start",
    ),
    (
        "task_responses",
        (*_KEY, ("task_id", "text"), ("response", "json"), ("created_at", "time")),
        "task_id",
    ),
    (
        "task_queues",
        (
            *_KEY,
            ("task_id", "text"),
            ("items", "json"),
            ("created_at", "time"),
            ("updated_at", "time"),
        ),
        "task_id",
    ),
    (
        "agent_memories",
        (
            ("namespace", "text"),
            ("key", "text"),
            ("value", "json"),
            ("created_at", "time"),
            ("updated_at", "time"),
        ),
        "namespace, key",
    ),
    (
        "team_threads",
        (*_KEY, ("thread_id", "text"), ("record", "json"), ("created_at", "time")),
        "created_at",
    ),
    ("team_posts", (*_KEY, ("thread_id", "text"), ("record", "json")), "seq"),
    (
        "team_inbox",
        (
            *_KEY,
            ("agent_name", "text"),
            ("entry_id", "text"),
            ("thread_id", "text"),
            ("ts", "text"),
            ("is_read", "bool"),
            ("shown", "bool"),
            ("record", "json"),
        ),
        "seq",
    ),
    (
        "team_attachments",
        (
            *_KEY,
            ("attachment_id", "text"),
            ("record", "json"),
            ("data", "bytes"),
            ("created_at", "time"),
        ),
        "attachment_id",
    ),
    # Push delivery (store/webhooks_schema.py): times are epoch seconds (REAL / DOUBLE
    # PRECISION), payloads and event lists JSON kept as text on both. Subscriptions come
    # before the deliveries and attempts that name them; secrets are stored as given.
    *(
        (table, WEBHOOK_COLUMNS[table], order)
        for table, order in (
            ("webhook_subscriptions", "created_at, subscription_id"),
            ("webhook_events", "created_at, event_id"),
            ("webhook_deliveries", "created_at, delivery_id"),
            ("webhook_attempts", "delivery_id, attempt"),
        )
    ),
    # Idempotency keys (store/idempotency.py), with their stored outcomes, so a
    # keyed retry against the copy is answered instead of run again.
    (
        "idempotency_keys",
        (
            *_KEY,
            ("idem_key", "text"),
            ("fingerprint", "text"),
            ("subject", "text"),
            ("context", "text"),
            ("status", "int"),
            ("content_type", "text"),
            ("body", "bytes"),
            ("holder", "text"),
            ("created_at", "real"),
            ("expires_at", "real"),
        ),
        "created_at, swarm_name, caller_role, caller_id, idem_key",
    ),
)

BATCH = 500


def is_postgres_url(location: str) -> bool:
    return location.split("://", 1)[0].split("+", 1)[0] in ("postgres", "postgresql")


def sqlite_path(location: str) -> Path:
    """`sqlite:///abs/path`, `sqlite:relative/path` or a plain path."""
    for prefix in ("sqlite:///", "sqlite://", "sqlite:"):
        if location.startswith(prefix):
            rest = location[len(prefix) :]
            return Path("/" + rest if prefix == "sqlite:///" else rest)
    return Path(location)


class _Endpoint:
    """One side of a copy, through `SqlConn`: each database opens, closes and streams rows
    its own way (`rows` hands them on as Python values: bools, times as datetimes)."""

    name: str
    c: SqlConn

    async def count(self, table: str) -> int:
        if not await self.c.tables([table]):
            return 0
        return int(await self.c.fetchval(f"SELECT COUNT(*) FROM {table}"))

    async def rows(
        self, table: str, columns: tuple[tuple[str, str], ...], order: str
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        if not await self.c.tables([table]):
            return
        names = ", ".join(f"CAST({c} AS TEXT)" if kind == "json" else c for c, kind in columns)
        async for batch in self._batches(f"SELECT {names} FROM {table} ORDER BY {order}"):
            yield [
                tuple(_from_source(v, kind) for v, (_, kind) in zip(r, columns, strict=True))
                for r in batch
            ]

    def _batches(self, sql: str) -> AsyncIterator[list[Any]]:
        raise NotImplementedError

    async def insert(
        self, table: str, columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]
    ) -> None:
        names = ", ".join(c for c, _ in columns)
        casts = _POSTGRES_CASTS if self.c.postgres else {}
        marks = ", ".join(f"?{casts.get(kind, '')}" for _, kind in columns)
        convert = _to_postgres if self.c.postgres else _to_sqlite
        await self.c.executemany(
            f"INSERT INTO {table} ({names}) VALUES ({marks})",
            [tuple(convert(v, k) for v, (_, k) in zip(r, columns, strict=True)) for r in rows],
        )


_POSTGRES_CASTS = {"json": "::text::jsonb", "time": "::timestamptz"}


class _Sqlite(_Endpoint):
    def __init__(self, location: str) -> None:
        self.path = sqlite_path(location)
        self.name = f"SQLite {self.path}"
        self.conn: sqlite3.Connection | None = None
        self.lock: Any = None

    async def open(self, *, create: bool) -> None:
        from mail.store.sqlite_schema import ProcessLock, connect, migrate

        if not create and not self.path.exists():
            raise FileNotFoundError(f"no SQLite database at {self.path}")
        self.lock = ProcessLock(self.path)
        self.lock.acquire()
        self.conn = connect(self.path)
        migrate(self.conn)
        self.c = SqliteConn(self.conn)

    async def _batches(self, sql: str) -> AsyncIterator[list[Any]]:
        assert self.conn is not None
        cursor = self.conn.execute(sql)
        while batch := cursor.fetchmany(BATCH):
            yield batch

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.lock is not None:
            self.lock.release()


class _Postgres(_Endpoint):
    def __init__(self, location: str) -> None:
        from mail.store.postgres_schema import normalize_dsn, redact_dsn

        self.dsn = normalize_dsn(location)
        self.name = f"PostgreSQL {redact_dsn(self.dsn)}"
        self.conn: Any = None

    async def open(self, *, create: bool) -> None:
        import asyncpg

        from mail.store.idempotency import ensure_table as ensure_idempotency
        from mail.store.postgres_schema import TEAM_SCHEMA, ensure_schema

        self.conn = await asyncpg.connect(self.dsn, timeout=10)
        self.c = PostgresConn(self.conn)
        if create:
            await ensure_schema(self.conn)  # also the webhook tables
            await self.conn.execute(TEAM_SCHEMA)
            await ensure_idempotency(self.conn)

    async def _batches(self, sql: str) -> AsyncIterator[list[Any]]:
        batch: list[Any] = []
        async with self.conn.transaction(isolation="repeatable_read", readonly=True):
            async for record in self.conn.cursor(sql, prefetch=BATCH):
                batch.append(record)
                if len(batch) >= BATCH:
                    yield batch
                    batch = []
        if batch:
            yield batch

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def _from_source(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "bool":
        return bool(value)
    if kind == "time":
        return _parse_time(value)
    return value


def _to_sqlite(value: Any, kind: str) -> Any:
    if isinstance(value, _dt.datetime):
        return value.astimezone(_dt.UTC).isoformat()
    return value


def _to_postgres(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "real":
        return float(value)  # a REAL column may hand back an int; float8 wants a float
    if kind == "bytes" and not isinstance(value, bytes):
        return bytes(value) if isinstance(value, bytearray | memoryview) else str(value).encode()
    return value


def _parse_time(value: Any) -> _dt.datetime:
    from mail.store.records import parse_start_time

    return parse_start_time(value)


def endpoint(location: str) -> _Sqlite | _Postgres:
    if is_postgres_url(location):
        return _Postgres(location)
    scheme = location.split("://", 1)[0] if "://" in location else ""
    if scheme and scheme != "sqlite":  # a mistyped URL is not a file name to create
        raise ValueError(f"{scheme}:// is neither a PostgreSQL URL nor a SQLite file")
    return _Sqlite(location)


async def copy_database(
    source: str, target: str, progress: Callable[[str, int], None] | None = None
) -> dict[str, int]:
    """Copy every table; returns table -> rows copied. Raises ValueError when the target
    already holds data (copy into an empty database)."""
    src, dst = endpoint(source), endpoint(target)
    await src.open(create=False)
    try:
        await dst.open(create=True)
        try:
            busy = [t for t, _, _ in TABLES if await dst.count(t)]
            if busy:
                raise ValueError(
                    f"{dst.name} already holds data (in {', '.join(busy)}); "
                    "copy into an empty database"
                )
            copied: dict[str, int] = {}
            # All or nothing: an interrupted copy leaves the target empty.
            async with dst.c.transaction():
                for table, columns, order in TABLES:
                    copied[table] = 0
                    async for rows in src.rows(table, columns, order):
                        await dst.insert(table, columns, rows)
                        copied[table] += len(rows)
                        if progress:
                            progress(table, copied[table])
            return copied
        finally:
            await dst.close()
    finally:
        await src.close()
