"""Copy everything a server stored from one database to another (SQLite <-> PostgreSQL)."""

from __future__ import annotations

import datetime as _dt
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from mail.store import schema
from mail.store.sql import PostgresConn, SqlConn, SqliteConn

# (table, ((column, kind), ...), the order rows are read in: the target's new sequence
# numbers follow it), in an order where a row comes after the rows it names.
TABLES: tuple[tuple[str, tuple[tuple[str, str], ...], str], ...] = tuple(
    (t.name, schema.COPIED[t.name], t.copy_order) for t in schema.TABLES if t.copy_order is not None
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

        from mail.store.postgres_schema import ensure_schema

        self.conn = await asyncpg.connect(self.dsn, timeout=10)
        self.c = PostgresConn(self.conn)
        if create:
            await ensure_schema(self.conn)

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
