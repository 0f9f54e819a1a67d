"""SQLite IdempotencyStore: the `idempotency_keys` table of the server's database file.

It shares the task store's `SqliteDatabase` (one connection, one writer thread). Every write
is committed before it returns: a key taken is on disk (WAL, like the task store's writes)
when the task it guards starts, so a retry after a kill -9 finds it. Writes that arrive
together (many clients at once) are committed together: one thread hop and one commit for
the batch. (A take on the event loop's own connection was measured too: it costs the event
loop more than the hop does, and commits every take on its own.)
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mail.store.base import InstanceKey
from mail.store.idempotency import (
    IdempotencyStore,
    KeyRecord,
    dump_context,
    load_context,
)
from mail.store.idempotency_schema import TABLE
from mail.store.sqlite_schema import open_database, transaction

_SCOPE = "swarm_name = ? AND caller_role = ? AND caller_id = ?"

_TAKE = f"""
    INSERT INTO {TABLE} (swarm_name, caller_role, caller_id, idem_key, fingerprint, subject,
                         context, holder, created_at, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
    ON CONFLICT (swarm_name, caller_role, caller_id, idem_key) DO UPDATE SET
        fingerprint = excluded.fingerprint, subject = excluded.subject,
        context = excluded.context, holder = excluded.holder, status = NULL,
        content_type = NULL, body = NULL, created_at = excluded.created_at,
        expires_at = excluded.expires_at
    WHERE {TABLE}.expires_at <= excluded.created_at
       OR (?11 AND {TABLE}.status IS NULL AND {TABLE}.fingerprint = excluded.fingerprint)
"""
_GET = f"SELECT * FROM {TABLE} WHERE {_SCOPE} AND idem_key = ? AND expires_at > ?"
_FINISH = f"""
    UPDATE {TABLE} SET status = ?, content_type = ?, body = ?
    WHERE {_SCOPE} AND idem_key = ?
"""
_RELEASE = f"DELETE FROM {TABLE} WHERE {_SCOPE} AND idem_key = ?"
_COUNT = f"SELECT count(*) FROM {TABLE} WHERE {_SCOPE} AND expires_at > ?"
_PURGE = f"DELETE FROM {TABLE} WHERE expires_at <= ?"
_PURGE_SCOPE = f"DELETE FROM {TABLE} WHERE {_SCOPE} AND expires_at <= ?"
_EVICT = f"""
    DELETE FROM {TABLE} WHERE {_SCOPE} AND idem_key IN (
        SELECT idem_key FROM {TABLE} WHERE {_SCOPE} AND status IS NOT NULL
        ORDER BY created_at LIMIT ?)
"""


def _scope(scope: InstanceKey) -> tuple[str, str, str]:
    return (scope.swarm_name, scope.caller_role, scope.caller_id)


def record_from_row(row: Any) -> KeyRecord:
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


Write = Callable[[sqlite3.Connection], Any]


class SqliteIdempotencyStore(IdempotencyStore):
    backend = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.db = open_database(path)
        self._started = False
        # Writes waiting for the next commit, and the task committing them.
        self._batch: list[tuple[Write, asyncio.Future[Any]]] = []
        self._drainer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True

    async def close(self) -> None:
        if self._drainer is not None:
            await asyncio.gather(self._drainer, return_exceptions=True)
        if self._started:
            self._started = False
            await self.db.release()

    async def _write(self, fn: Write) -> Any:
        """Run `fn` in a write transaction, committed with the writes queued beside it.

        The commit runs in a task of its own: a caller that is cancelled meanwhile does not
        strand the writes queued behind its own (its write itself may still commit).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._batch.append((fn, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._batch:
            batch, self._batch = self._batch, []
            await self._commit(batch)

    async def _commit(self, batch: list[tuple[Write, asyncio.Future[Any]]]) -> None:
        def run(conn: sqlite3.Connection) -> list[tuple[bool, Any]]:
            # One transaction for the batch; a write that fails fails the batch (a full
            # disk, a broken file: the others would fail as well), every caller hears it.
            with transaction(conn):
                return [(True, fn(conn)) for fn, _ in batch]

        try:
            results = await self.db.run(run)
        except Exception as exc:  # the database is closed or failing: every write of the batch
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (ok, value), (_, future) in zip(results, batch, strict=True):
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    async def get(self, scope: InstanceKey, key: str, now: float) -> KeyRecord | None:
        def read(conn: sqlite3.Connection) -> KeyRecord | None:
            row = conn.execute(_GET, (*_scope(scope), key, now)).fetchone()
            return None if row is None else record_from_row(row)

        return await self.db.run(read)

    async def take(
        self, scope: InstanceKey, key: str, record: KeyRecord, *, replace: bool = False
    ) -> KeyRecord | None:
        args = (
            *_scope(scope),
            key,
            record.fingerprint,
            record.subject,
            dump_context(record.context),
            record.holder,
            record.created_at,
            record.expires_at,
            1 if replace else 0,
        )

        def write(conn: sqlite3.Connection) -> bool:
            return bool(conn.execute(_TAKE, args).rowcount == 1)

        for _ in range(3):
            stored = await self._write(write)
            if stored:
                return None
            held = await self.get(scope, key, record.created_at)
            if held is not None:
                return held
            # Its holder was released or expired between the two statements: take it now.
        return record

    async def finish(
        self, scope: InstanceKey, key: str, status: int, content_type: str | None, body: bytes
    ) -> None:
        args = (status, content_type, bytes(body), *_scope(scope), key)
        await self._write(lambda conn: conn.execute(_FINISH, args))

    async def finish_many(
        self, outcomes: list[tuple[InstanceKey, str, int, str | None, bytes]]
    ) -> None:
        rows = [
            (status, content_type, bytes(body), *_scope(scope), key)
            for scope, key, status, content_type, body in outcomes
        ]
        await self._write(lambda conn: conn.executemany(_FINISH, rows))

    async def release(self, scope: InstanceKey, key: str) -> None:
        args = (*_scope(scope), key)
        await self._write(lambda conn: conn.execute(_RELEASE, args))

    async def count(self, scope: InstanceKey, now: float) -> int:
        def read(conn: sqlite3.Connection) -> int:
            return int(conn.execute(_COUNT, (*_scope(scope), now)).fetchone()[0])

        return await self.db.run(read)

    async def purge(self, now: float, scope: InstanceKey | None = None) -> int:
        args: tuple[Any, ...]
        if scope is None:
            sql, args = _PURGE, (now,)
        else:
            sql, args = _PURGE_SCOPE, (*_scope(scope), now)
        removed: int = await self._write(lambda conn: conn.execute(sql, args).rowcount)
        return removed

    async def evict_finished(self, scope: InstanceKey, count: int) -> int:
        args = (*_scope(scope), *_scope(scope), max(count, 0))
        removed: int = await self._write(lambda conn: conn.execute(_EVICT, args).rowcount)
        return removed
