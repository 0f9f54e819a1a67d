"""SQLite TeamStore: threads, posts, inboxes and attachments in the server's database file.

It shares the task store's `SqliteDatabase` (one connection, one thread, one writer).
Every write is committed before it returns, like the PostgreSQL team store: a tool call
that reported success survives a kill -9. Writes go through `RetryingWrites`: while the
file cannot be written (a full disk), they stay queued in order and land once it can,
and the store reports itself degraded meanwhile.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from mail.store.base import InstanceKey
from mail.store.lifecycle_sqlite import _FINISHED
from mail.store.retrying import RetryingWrites
from mail.store.sqlite_schema import is_transient_error, open_database, transaction, utc_now
from mail.store.team_base import (
    TEAM_PRUNE_BATCH,
    InboxQuery,
    Record,
    TeamStore,
    cutoff_text,
    dump_record,
    entry_from_row,
    inbox_rows,
    key_clause,
    key_tuple,
    trim_sql,
    unread_from_rows,
)

_KEY = key_clause("?")

# Posts, inbox entries and attachments name the task they came with ($.task_id). One whose
# task (of the same instance) is kept is kept too, whatever its age: a task that still runs
# or waits (a breakpoint, a review) may need it, and one finished (or changed) since the
# cutoff is read with it (an upload, its thread, its inbox) until the task prune removes it.
_OF_TASKS = ("team_posts", "team_inbox", "team_attachments")
_TASK_LIVE = (
    " AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.swarm_name = {table}.swarm_name"
    " AND t.caller_role = {table}.caller_role AND t.caller_id = {table}.caller_id"
    " AND t.task_id = json_extract({table}.record, '$.task_id')"
    " AND NOT (t.updated_at < ?1 AND " + _FINISHED + "))"
)

# What is older than the cutoff (?1), per table; threads last, once their posts are gone.
_EXPIRED: tuple[tuple[str, str], ...] = (
    ("team_posts", "json_extract(record, '$.timestamp') < ?1"),
    ("team_inbox", "ts < ?1"),
    ("team_attachments", "created_at < ?1"),
    (
        "team_threads",
        "COALESCE(json_extract(record, '$.updated_at'), created_at) < ?1 AND NOT EXISTS"
        " (SELECT 1 FROM team_posts p WHERE p.swarm_name = team_threads.swarm_name"
        " AND p.caller_role = team_threads.caller_role AND p.caller_id = team_threads.caller_id"
        " AND p.thread_id = team_threads.thread_id)",
    ),
)
_SIZES = (
    f"SELECT (SELECT COALESCE(SUM(length(CAST(record AS BLOB))), 0) FROM team_threads WHERE {_KEY})"
    f" + (SELECT COALESCE(SUM(length(CAST(record AS BLOB))), 0) FROM team_posts WHERE {_KEY})"
    f" + (SELECT COALESCE(SUM(length(CAST(record AS BLOB))), 0) FROM team_inbox WHERE {_KEY})"
    " + (SELECT COALESCE(SUM(length(data) + length(CAST(record AS BLOB))), 0)"
    f" FROM team_attachments WHERE {_KEY})"
)


def _prune_step(
    conn: sqlite3.Connection, table: str, condition: str, cutoff: str, after: int
) -> tuple[int, int]:
    """One batch of `table`'s expired rows past rowid `after`: (rows removed, the rowid to
    go on after). Each batch goes on where the last one stopped: rows that stay though
    older than the cutoff (a live task's) are read once per prune, not once per batch."""
    with transaction(conn):
        removed = conn.execute(
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE rowid > ?2"
            f" AND ({condition}) ORDER BY rowid LIMIT {TEAM_PRUNE_BATCH}) RETURNING rowid",
            (cutoff, after),
        ).fetchall()
    return len(removed), max((row[0] for row in removed), default=after)


Write = Callable[[sqlite3.Connection], None]


class SqliteTeamStore(TeamStore):
    def __init__(self, path: str | Path) -> None:
        self.db = open_database(path)
        self._started = False
        self.writes: RetryingWrites[Write] = RetryingWrites(
            self._apply, is_transient=is_transient_error, name="mail.store.team"
        )

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True
            self.writes.start()

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.writes.close()
            await self.db.release()

    async def _apply(self, writes: list[Write]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                for write in writes:
                    write(conn)

        await self.db.run(run)

    async def _write(self, fn: Write) -> None:
        await self.writes.write(fn)

    async def _rows(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        return await self.db.run(lambda conn: conn.execute(sql, args).fetchall())

    # -- threads ---------------------------------------------------------------------
    async def save_thread(self, key: InstanceKey, thread: Record) -> None:
        def save(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO team_threads (swarm_name, caller_role, caller_id, thread_id,"
                " record, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT"
                " (swarm_name, caller_role, caller_id, thread_id) DO UPDATE SET"
                " record = excluded.record",
                (*key_tuple(key), thread["thread_id"], dump_record(thread), utc_now()),
            )

        await self._write(save)

    async def get_thread(self, key: InstanceKey, thread_id: str) -> Record | None:
        rows = await self._rows(
            f"SELECT record FROM team_threads WHERE {_KEY} AND thread_id = ?",
            *key_tuple(key),
            thread_id,
        )
        return json.loads(rows[0]["record"]) if rows else None

    async def list_threads(self, key: InstanceKey | None) -> list[tuple[InstanceKey, Record]]:
        select = "SELECT swarm_name, caller_role, caller_id, record FROM team_threads"
        if key is None:
            rows = await self._rows(f"{select} ORDER BY created_at, rowid")
        else:
            rows = await self._rows(
                f"{select} WHERE {_KEY} ORDER BY created_at, rowid", *key_tuple(key)
            )
        return [(InstanceKey(r[0], r[1], r[2]), json.loads(r["record"])) for r in rows]

    async def count_threads(self, key: InstanceKey) -> int:
        rows = await self._rows(f"SELECT COUNT(*) FROM team_threads WHERE {_KEY}", *key_tuple(key))
        return int(rows[0][0])

    async def add_post(self, key: InstanceKey, post: Record) -> None:
        args = (*key_tuple(key), post["thread_id"])
        limit = self.max_posts_per_thread

        def add(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO team_posts (swarm_name, caller_role, caller_id, thread_id, record)"
                " VALUES (?, ?, ?, ?, ?)",
                (*args, dump_record(post)),
            )
            if limit is not None:
                conn.execute(trim_sql("team_posts", "thread_id", "?"), (*args, limit))

        await self._write(add)

    async def thread_posts(
        self, key: InstanceKey, thread_id: str, limit: int | None = None
    ) -> list[Record]:
        rows = await self._rows(
            f"SELECT record FROM team_posts WHERE {_KEY} AND thread_id = ?"
            " ORDER BY seq DESC LIMIT ?",
            *key_tuple(key),
            thread_id,
            -1 if not limit else limit,
        )
        return [json.loads(r["record"]) for r in reversed(rows)]

    # -- inboxes ---------------------------------------------------------------------
    async def add_inbox_entries(self, key: InstanceKey, entries: Iterable[Record]) -> None:
        k = key_tuple(key)
        rows = inbox_rows(key, entries)
        if not rows:
            return
        limit = self.max_inbox_entries

        def add(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO team_inbox (swarm_name, caller_role, caller_id, agent_name,"
                " entry_id, thread_id, ts, is_read, shown, record)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                rows,
            )
            if limit is not None:
                for agent in sorted({row[3] for row in rows}):
                    conn.execute(trim_sql("team_inbox", "agent_name", "?"), (*k, agent, limit))

        await self._write(add)

    async def select_inbox(self, key: InstanceKey, agent: str, query: InboxQuery) -> list[Record]:
        order = "ASC" if query.oldest_first else "DESC"
        rows = await self._rows(
            f"SELECT record, is_read, shown FROM team_inbox WHERE {_KEY} AND agent_name = ?"
            " AND (?5 IS NULL OR thread_id = ?5) AND (?6 IS NULL OR ts > ?6)"
            " AND (NOT ?7 OR NOT shown) AND (NOT ?9 OR NOT is_read)"
            f" AND (?10 IS NULL OR entry_id = ?10) ORDER BY seq {order} LIMIT ?8",
            *key_tuple(key),
            agent,
            query.thread_id,
            query.since,
            query.unshown_only,
            -1 if query.limit is None else query.limit,
            query.unread_only,
            query.entry_id,
        )
        return [entry_from_row(r) for r in rows]

    async def mark(
        self, key: InstanceKey, agent: str, entry_ids: Iterable[str], *, field: str
    ) -> None:
        column = {"read": "is_read", "shown": "shown"}[field]
        args = [(*key_tuple(key), agent, entry_id) for entry_id in entry_ids]

        def mark(conn: sqlite3.Connection) -> None:
            conn.executemany(
                f"UPDATE team_inbox SET {column} = 1"
                f" WHERE {_KEY} AND agent_name = ? AND entry_id = ?",
                args,
            )

        await self._write(mark)

    async def unread_counts(
        self, key: InstanceKey, thread_id: str | None = None
    ) -> dict[str, dict[str, int]]:
        rows = await self._rows(
            "SELECT agent_name, COALESCE(thread_id, 'direct') AS place, COUNT(*) AS n"
            f" FROM team_inbox WHERE {_KEY} AND NOT is_read"
            " AND (?4 IS NULL OR thread_id = ?4) GROUP BY agent_name, place",
            *key_tuple(key),
            thread_id,
        )
        return unread_from_rows(rows)

    # -- attachments -----------------------------------------------------------------
    async def put_attachment(self, key: InstanceKey, record: Record, data: bytes) -> None:
        def put(conn: sqlite3.Connection) -> None:
            conn.execute(
                # (replacing: a keyed request's retry stores its uploads under their ids)
                "INSERT OR REPLACE INTO team_attachments (swarm_name, caller_role, caller_id,"
                " attachment_id,"
                " record, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*key_tuple(key), record["attachment_id"], dump_record(record), data, utc_now()),
            )

        await self.writes.write_now(put)  # the bytes do not wait in memory

    async def attachment_bytes(self, key: InstanceKey) -> int:
        rows = await self._rows(
            f"SELECT COALESCE(SUM(length(data)), 0) FROM team_attachments WHERE {_KEY}",
            *key_tuple(key),
        )
        return int(rows[0][0])

    async def get_attachment(
        self, key: InstanceKey, attachment_id: str, *, with_data: bool = True
    ) -> tuple[Record, bytes] | None:
        column = "data" if with_data else "X'' AS data"
        rows = await self._rows(
            f"SELECT record, {column} FROM team_attachments WHERE {_KEY} AND attachment_id = ?",
            *key_tuple(key),
            attachment_id,
        )
        if not rows:
            return None
        return json.loads(rows[0]["record"]), bytes(rows[0]["data"])

    # -- lifecycle -------------------------------------------------------------------
    async def stored_bytes(self, key: InstanceKey) -> int:
        rows = await self._rows(_SIZES, *key_tuple(key))
        return int(rows[0][0] or 0)

    async def prune_before(
        self, cutoff: datetime.datetime, live_tasks: Collection[tuple[InstanceKey, str]] = ()
    ) -> int:
        text = cutoff_text(cutoff)
        removed = 0
        for table, condition in _EXPIRED:
            if table in _OF_TASKS:
                condition += _TASK_LIVE.format(table=table)
            after = -(1 << 63)  # the lowest rowid (each of these tables has one)
            while True:  # a batch per transaction: the task store's writes go on in between
                count, after = await self.db.run(_prune_step, table, condition, text, after)
                removed += count
                if count < TEAM_PRUNE_BATCH:
                    break
        return removed
