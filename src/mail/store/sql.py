"""One SQL text for SQLite and PostgreSQL, run through one async connection interface."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from mail.store.records import StoreUnavailableError
from mail.store.sqlite_schema import _THREAD_JOB_PAGES, SqliteDatabase, transaction

T = TypeVar("T")
P = ParamSpec("P")
Row = Any  # sqlite3.Row or asyncpg.Record: both index by name and by position

_MARK = re.compile(r"'(?:[^']|'')*'|\?(\d*)")  # a literal, or a parameter
_ANY = re.compile(r"=\s*ANY\(\?(\d*)\)")
_WRITE = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)


@functools.lru_cache(maxsize=2048)
def postgres_text(sql: str) -> str:
    highest = 0

    def number(match: re.Match[str]) -> str:
        nonlocal highest
        if match.group(0).startswith("'"):
            return match.group(0)
        n = int(match.group(1) or highest + 1)
        highest = max(highest, n)
        return f"${n}"

    return _MARK.sub(number, sql)


@functools.lru_cache(maxsize=2048)
def sqlite_text(sql: str) -> tuple[str, bool]:
    """The SQLite text, and whether it writes."""
    text = _ANY.sub(r"IN (SELECT value FROM json_each(?\1))", sql)
    head = text.lstrip().upper()
    if head.startswith("WITH"):  # WITH ... INSERT / UPDATE / DELETE writes
        return text, _WRITE.search(text) is not None
    return text, not head.startswith("SELECT")


def marks(values: Sequence[Any]) -> str:
    """One ``?`` per value: ``x IN ({marks(values)})`` for a short list on a hot path."""
    return ", ".join("?" * len(values))


def json_field(postgres: bool, column: str, *path: str) -> str:
    """The value at `path` in a JSON column (as text in PostgreSQL)."""
    if postgres:
        return f"{column} #>> '{{{','.join(path)}}}'"
    return f"json_extract({column}, '$.{'.'.join(path)}')"


def octets(postgres: bool, column: str, *, binary: bool = False) -> str:
    """The bytes a text or JSON column's value (or a BLOB / BYTEA's, `binary`) holds."""
    if postgres:
        return f"octet_length({column})" if binary else f"octet_length({column}::text)"
    return f"length(CAST({column} AS BLOB))"


class SqlConn:
    """The interface of a connection, whichever the database."""

    postgres: bool

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        raise NotImplementedError

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        """The rows changed."""
        raise NotImplementedError

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def transaction(self) -> contextlib.AbstractAsyncContextManager[None]:
        raise NotImplementedError

    def snapshot(self) -> contextlib.AbstractAsyncContextManager[None]:
        """A read-only transaction: its reads see one state of the database."""
        raise NotImplementedError

    def locking(self, clause: str) -> str:
        """`clause` (``FOR UPDATE ...``) where rows are locked (PostgreSQL), else nothing."""
        return clause if self.postgres else ""

    async def tables(self, names: Sequence[str]) -> list[str]:
        """Those of `names` that are tables of the database, in their order (a view over
        another layout is not; in PostgreSQL, a table of the connection's search path)."""
        sql = (
            "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relname = ANY(?)"
            " AND pg_table_is_visible(oid)"
            if self.postgres
            else "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ANY(?)"
        )
        found = {row[0] for row in await self.fetch(sql, list(names))}
        return [name for name in names if name in found]


def _sqlite_args(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(json.dumps(a) if isinstance(a, list | tuple) else a for a in args)


class SqliteConn(SqlConn):
    postgres = False

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._pending: bool = False  # in transaction(), before its first write
        self._open: transaction | None = None
        self._depth = 0  # transaction()s entered: the outer one, then savepoints

    def _begin(self, writes: bool) -> None:
        if writes and self._pending:
            self._pending = False
            self._open = transaction(self.conn)
            self._open.__enter__()

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        text, writes = sqlite_text(sql)
        self._begin(writes)
        return self.conn.execute(text, _sqlite_args(args)).fetchall()

    async def execute(self, sql: str, *args: Any) -> int:
        text, writes = sqlite_text(sql)
        self._begin(writes)
        return self.conn.execute(text, _sqlite_args(args)).rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        text, writes = sqlite_text(sql)
        self._begin(writes)
        self.conn.executemany(text, [_sqlite_args(r) for r in rows])

    def transaction(self) -> SqliteConn:
        return self

    async def __aenter__(self) -> None:  # transaction(): BEGIN IMMEDIATE at the first write
        if self._depth == 0:
            self._pending = True
        else:  # inside another: a savepoint of the begun transaction
            self._begin(True)
            self.conn.execute(f"SAVEPOINT mail_{self._depth + 1}")
        self._depth += 1  # (counted once entered: a failed BEGIN leaves no level behind)

    async def __aexit__(self, error: type[BaseException] | None, *rest: object) -> None:
        depth, self._depth = self._depth, self._depth - 1
        if depth > 1:
            if self.conn.in_transaction:  # (SQLite may have rolled it all back itself)
                if error is not None:
                    self.conn.execute(f"ROLLBACK TO mail_{depth}")
                self.conn.execute(f"RELEASE mail_{depth}")
            return
        self._pending, opened, self._open = False, self._open, None
        if opened is not None:
            opened.__exit__(error)

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")


class PostgresConn(SqlConn):
    postgres = True

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return await self.conn.fetch(postgres_text(sql), *args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        return await self.conn.fetchrow(postgres_text(sql), *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.conn.fetchval(postgres_text(sql), *args)

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self.conn.execute(postgres_text(sql), *args)
        last = status.rsplit(" ", 1)[-1] if status else ""
        return int(last) if last.isdigit() else 0

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            await self.conn.executemany(postgres_text(sql), rows)

    def transaction(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.conn.transaction()  # type: ignore[no-any-return]

    def snapshot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.conn.transaction(isolation="repeatable_read", readonly=True)  # type: ignore[no-any-return]


Op = Callable[Concatenate[SqlConn, P], Coroutine[Any, Any, T]]


def run_at_once(coro: Coroutine[Any, Any, T]) -> T:
    """A coroutine that never waits, run to its end on this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a SQLite operation waited for something: it cannot run on its thread")


class Sql:
    """Runs operations on one database. `unavailable` (None: the driver's errors as they
    are) begins the StoreUnavailableError (a 503 with Retry-After) of one it cannot run now."""

    postgres: bool

    async def run(self, op: Op[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        raise NotImplementedError


class SqliteSql(Sql):
    postgres = False

    def __init__(self, db: SqliteDatabase, unavailable: str | None = None) -> None:
        self.db, self.unavailable = db, unavailable

    async def run(self, op: Op[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run_pages(op, _THREAD_JOB_PAGES, *args, **kwargs)

    async def run_pages(self, op: Op[P, T], pages: int, *args: P.args, **kwargs: P.kwargs) -> T:
        """`run`; `pages`: about how many pages it writes (`SqliteDatabase.run`). A database
        that does not take it now: a full disk, another process's lock, every
        OperationalError."""
        try:
            return await self.db.run(
                lambda conn: run_at_once(op(SqliteConn(conn), *args, **kwargs)), pages=pages
            )
        except sqlite3.OperationalError as exc:
            if self.unavailable is None:
                raise
            raise StoreUnavailableError(f"{self.unavailable} ({exc}); try again later") from exc


class PostgresSql(Sql):
    postgres = True

    def __init__(self, pool: Callable[[], Any], unavailable: str | None = None) -> None:
        self.pool, self.unavailable = pool, unavailable

    async def run(self, op: Op[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """PostgreSQL out of reach: down, restarting, its connections dropped
        (`mail.store.postgres.is_transient_error`)."""
        from mail.store.postgres import is_transient_error
        from mail.store.postgres_schema import refusal_reason

        pool = self.pool()
        if pool is None:
            raise RuntimeError("the PostgreSQL store is not started")
        try:
            async with pool.acquire() as conn:
                return await op(PostgresConn(conn), *args, **kwargs)
        except Exception as exc:
            if (
                self.unavailable is None
                or isinstance(exc, StoreUnavailableError)
                or not is_transient_error(exc)
            ):
                raise
            raise StoreUnavailableError(
                f"{self.unavailable} ({refusal_reason(exc)}); try again later"
            ) from exc
