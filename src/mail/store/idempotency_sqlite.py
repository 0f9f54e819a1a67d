"""SQLite IdempotencyStore: the `idempotency_keys` table of the server's database file.

It shares the task store's `SqliteDatabase` (one connection, one writer thread). Every write
is committed before it returns: a key taken is on disk (WAL, like the task store's writes)
when the task it guards starts, so a retry after a kill -9 finds it. What one turn of the
event loop queues (the takes of the requests that arrived together, outcomes) goes to the
database thread in one hop, and comes back with one `call_soon_threadsafe`. The takes of a
hop are one multi-row ``INSERT ... ON CONFLICT``, committed on its own (no BEGIN / COMMIT
calls); the holder of a key already taken is read in the same hop. With the table's rowid
layout (``idempotency_schema``), this took the database thread's CPU for keys, per keyed
request of bench/http.py, from about 46 us (a statement per take, in BEGIN/COMMIT) to 35. (A take on the event loop's own connection was
measured too: it costs the event loop more than the hop does.)"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mail.store.base import InstanceKey
from mail.store.idempotency import (
    IdempotencyStore,
    KeyRecord,
    load_context,
    take_row,
)
from mail.store.idempotency_schema import TABLE
from mail.store.sqlite_schema import SqliteDatabase, is_busy, open_database, transaction

_SCOPE = "swarm_name = ? AND caller_role = ? AND caller_id = ?"

# A take: a new key, or one whose holder expired, is (re)written; a live one is left alone.
_TAKE_HEAD = f"""
    INSERT INTO {TABLE} (swarm_name, caller_role, caller_id, idem_key, fingerprint, subject,
                         context, holder, created_at, expires_at)"""
_TAKE_UPDATE = f"""
    ON CONFLICT (swarm_name, caller_role, caller_id, idem_key) DO UPDATE SET
        fingerprint = excluded.fingerprint, subject = excluded.subject,
        context = excluded.context, holder = excluded.holder, status = NULL,
        content_type = NULL, body = NULL, created_at = excluded.created_at,
        expires_at = excluded.expires_at
    WHERE {TABLE}.expires_at <= excluded.created_at"""
# One key; ?11: a takeover of an unfinished key with the same fingerprint (?12: only the
# record created at that time, the one the takeover found).
_TAKE = f"""{_TAKE_HEAD}
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10){_TAKE_UPDATE}
       OR (?11 AND {TABLE}.status IS NULL AND {TABLE}.fingerprint = excluded.fingerprint
           AND (?12 IS NULL OR {TABLE}.created_at = ?12))
"""
_GET = f"SELECT * FROM {TABLE} WHERE {_SCOPE} AND idem_key = ? AND expires_at > ?"
_GET_ANY = f"SELECT * FROM {TABLE} WHERE {_SCOPE} AND idem_key = ?"
# The take of a batch of keys (no takeovers among them): one statement, one commit.
_TAKE_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_TAKE_MANY = f"""{_TAKE_HEAD}
    VALUES {{rows}}{_TAKE_UPDATE}
"""
# Outcomes of a batch of keys: one statement.
_FINISH_ROW = "(?, ?, ?, ?, ?, ?, ?)"
_FINISH_MANY = f"""
    UPDATE {TABLE} SET status = v.column5, content_type = v.column6, body = v.column7
    FROM (VALUES {{rows}}) AS v
    WHERE swarm_name = v.column1 AND caller_role = v.column2 AND caller_id = v.column3
      AND idem_key = v.column4
"""
# Rows per multi-row statement (10 or 7 parameters each: far below SQLite's limit).
_CHUNK = 64
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


@functools.cache
def _take_sql(count: int) -> str:
    return _TAKE_MANY.format(rows=", ".join([_TAKE_ROW] * count))


@functools.cache
def _finish_sql(count: int) -> str:
    return _FINISH_MANY.format(rows=", ".join([_FINISH_ROW] * count))


def _chunks(rows: list[Any]) -> list[list[Any]]:
    return [rows[start : start + _CHUNK] for start in range(0, len(rows), _CHUNK)]


def take_rows(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> list[KeyRecord | None]:
    """Take keys (rows of `_TAKE_MANY`'s columns): None for each row stored, else the live
    record holding its key. Each chunk is one statement, committed on its own; a key that
    is held (a retry) is looked up after it, on this thread, with nothing in between."""
    out: list[KeyRecord | None] = [None] * len(rows)
    first: dict[tuple[Any, ...], int] = {}
    repeats: list[int] = []  # the same key twice in one batch: the first row gets it
    for index, row in enumerate(rows):
        if first.setdefault(row[:4], index) != index:
            repeats.append(index)
    for chunk in _chunks(list(first.values())):
        values = [value for index in chunk for value in rows[index]]
        stored = conn.execute(_take_sql(len(chunk)), values).rowcount
        if stored != len(chunk):
            for index in chunk:
                out[index] = _held(conn, rows[index], mine=True)
    for index in repeats:
        out[index] = _held(conn, rows[index], mine=False)
    return out


def _held(conn: sqlite3.Connection, row: tuple[Any, ...], *, mine: bool) -> KeyRecord | None:
    """After a take of `row`: None when it holds its key (`mine`: the row stored is this
    one), else the live record that does."""
    current = conn.execute(_GET_ANY, row[:4]).fetchone()
    own = (row[4], row[7], row[8])  # fingerprint, holder, created_at
    if mine and current is not None:
        if (current["fingerprint"], current["holder"], current["created_at"]) == own:
            return None
    if current is not None and current["expires_at"] > row[8]:
        return record_from_row(current)
    # Absent or expired (a repeat whose first row was not stored): take it on its own.
    if conn.execute(_TAKE, (*row, 0, None)).rowcount == 1:
        return None
    current = conn.execute(_GET_ANY, row[:4]).fetchone()
    if current is None:  # (the insert found a row, and nothing else writes in between)
        raise sqlite3.IntegrityError("an idempotency key was neither stored nor found")
    return record_from_row(current)


def finish_rows(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Outcomes (scope, key, status, content type, body rows): one statement per chunk."""
    for chunk in _chunks(rows):
        conn.execute(_finish_sql(len(chunk)), [value for row in chunk for value in row])


Write = Callable[[sqlite3.Connection], Any]


def submit(db: SqliteDatabase, fn: Callable[[sqlite3.Connection], Any]) -> Any:
    """`fn(conn)` on the database's thread, as `SqliteDatabase.run` does, but without an
    asyncio future in between: the caller gets the `concurrent.futures.Future` and hears
    of it from that thread (one loop turn less than awaiting `run`, on the request path)."""
    return db.submit_threadsafe(fn)


def _settle(results: Any, waiting: list[tuple[Any, asyncio.Future[Any]]]) -> None:
    """Answer each future of a hop: its result, or the exception that failed them all."""
    for index, (_, future) in enumerate(waiting):
        if future.done():
            continue
        if isinstance(results, BaseException):
            future.set_exception(results)
        else:
            future.set_result(results[index])


class SqliteIdempotencyStore(IdempotencyStore):
    backend = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.db = open_database(path)
        self._started = False
        # Writes and takes waiting for the next hop; the hop under way; who waits for quiet.
        self._batch: list[tuple[Write, asyncio.Future[Any]]] = []
        self._takes: list[tuple[tuple[Any, ...], asyncio.Future[KeyRecord | None]]] = []
        self._hop: concurrent.futures.Future[Any] | None = None
        self._scheduled = False  # a hop leaves at the end of this turn of the loop
        self._quiet: list[asyncio.Future[None]] = []

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True

    async def close(self) -> None:
        if self._hop is not None or self._scheduled:
            quiet: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._quiet.append(quiet)
            await quiet
        if self._started:
            self._started = False
            await self.db.release()

    async def _write(self, fn: Write) -> Any:
        """Run `fn` in a write transaction, committed with the writes queued beside it.

        No caller owns the hop: one that is cancelled meanwhile strands nobody (its write
        itself may still commit).
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._batch.append((fn, future))
        self._schedule(asyncio.get_running_loop())
        return await future

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        """The next hop leaves once this turn of the loop has queued what it has: a hop per
        request would cost more than the statements do (each wakes the database thread and
        trades the GIL with it), so the takes of one turn travel together."""
        if self._hop is None and not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._send, loop)

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand what is queued to the database thread, one hop; the next one leaves when it
        is back (what queues meanwhile goes with it). The results come back with one
        `call_soon_threadsafe`: the waiting requests run on the loop's next turn."""
        self._scheduled = False
        batch, self._batch = self._batch, []
        takes, self._takes = self._takes, []
        if not batch and not takes:
            self._wake_quiet()
            return

        def run(conn: sqlite3.Connection) -> tuple[Any, Any]:
            # The writes: one transaction; a write that fails fails them all (a full disk, a
            # broken file: the others would fail as well), every caller hears it. The takes:
            # one statement of their own, after them.
            done: Any = []
            if batch:
                try:
                    with transaction(conn):
                        done = [fn(conn) for fn, _ in batch]
                except Exception as exc:  # noqa: BLE001 - handed to the writers' futures
                    done = exc
            taken: Any = []
            if takes:
                try:
                    taken = take_rows(conn, [row for row, _ in takes])
                except Exception as exc:  # noqa: BLE001 - handed to the takers' futures
                    taken = exc
            return done, taken

        def back(hop: concurrent.futures.Future[Any]) -> None:  # on the database thread
            loop.call_soon_threadsafe(self._landed, hop, batch, takes, loop)

        def run_here(conn: sqlite3.Connection) -> tuple[Any, Any]:
            # As `run`; a lock of another process fails it whole, to run again on the thread
            # (the writes rolled back; a take finds its own row, see `_held`).
            results = run(conn)
            for result in results:
                if is_busy(result):
                    raise result
            return results

        try:
            # On this thread when the database's thread is idle: a hop there (a wake-up and
            # GIL hand-overs) costs more CPU than the statements (one autocommitted INSERT).
            here, results = self.db.run_inline(run_here, pages=1 + len(batch) + len(takes) // 8)
            if here:
                done, taken = results  # type: ignore[misc]
                _settle(done, batch)
                _settle(taken, takes)
                self._after_hop(loop)
                return
            self._hop = submit(self.db, run)
        except Exception as exc:  # the database is closed: every write of the batch fails
            _settle(exc, batch)
            _settle(exc, takes)
            self._wake_quiet()
            return
        self._hop.add_done_callback(back)

    def _landed(
        self,
        hop: concurrent.futures.Future[Any],
        batch: list[tuple[Write, asyncio.Future[Any]]],
        takes: list[tuple[tuple[Any, ...], asyncio.Future[KeyRecord | None]]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._hop = None
        error = hop.exception()
        done, taken = (error, error) if error is not None else hop.result()
        _settle(done, batch)
        _settle(taken, takes)
        self._after_hop(loop)

    def _after_hop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._batch or self._takes:
            self._schedule(loop)
        else:
            self._wake_quiet()

    def _wake_quiet(self) -> None:
        for quiet in self._quiet:
            if not quiet.done():
                quiet.set_result(None)
        self._quiet.clear()

    async def get(self, scope: InstanceKey, key: str, now: float) -> KeyRecord | None:
        def read(conn: sqlite3.Connection) -> KeyRecord | None:
            row = conn.execute(_GET, (*_scope(scope), key, now)).fetchone()
            return None if row is None else record_from_row(row)

        return await self.db.run(read)

    async def take(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        row = take_row(_scope(scope), key, record)
        if replace:  # a takeover (rare): its own statement, and a read when it is refused
            return await self._take_over(scope, key, record, row, over)
        if self._hop is None and not self._scheduled:
            # Nothing queued and the database's thread idle: taken and committed right here,
            # without waiting for a turn of the loop (each one a request's latency). A lock
            # of another process, or a busy thread: queued as below.
            here, taken = self.db.run_inline(lambda conn: take_rows(conn, [row]), pages=1)
            if here:
                return taken[0]  # type: ignore[index]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[KeyRecord | None] = loop.create_future()
        self._takes.append((row, future))
        self._schedule(loop)
        return await future

    async def _take_over(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        row: tuple[Any, ...],
        over: float | None,
    ) -> KeyRecord | None:
        def write(conn: sqlite3.Connection) -> bool:
            return bool(conn.execute(_TAKE, (*row, 1, over)).rowcount == 1)

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
        await self._write(lambda conn: conn.execute(_FINISH, args).rowcount)  # (no cursor out)

    async def finish_many(
        self, outcomes: list[tuple[InstanceKey, str, int, str | None, bytes]]
    ) -> None:
        rows = [
            (*_scope(scope), key, status, content_type, bytes(body))
            for scope, key, status, content_type, body in outcomes
        ]
        await self._write(lambda conn: finish_rows(conn, rows))

    async def release(self, scope: InstanceKey, key: str) -> None:
        args = (*_scope(scope), key)
        await self._write(lambda conn: conn.execute(_RELEASE, args).rowcount)  # (no cursor out)

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
