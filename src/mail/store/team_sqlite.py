"""SQLite TeamStore (`team_sql`), in the server's database file: it shares the task store's
`SqliteDatabase` (one connection, one thread, one writer). Here: what SQLite spells its own
way (sizes, the prune by rowid)."""

from __future__ import annotations

import datetime
import json
import sqlite3
from collections.abc import Collection
from pathlib import Path

from mail.store.base import InstanceKey
from mail.store.lifecycle_sqlite import _FINISHED
from mail.store.sql import SqliteSql
from mail.store.sqlite_schema import (
    MEMORY,
    is_transient_error,
    open_database,
    transaction,
    utc_now,
)
from mail.store.team_base import TEAM_PRUNE_BATCH, cutoff_text, key_clause, key_tuple
from mail.store.team_sql import SqlTeamStore

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
    # and the tasks the caller names live (?3, JSON [[swarm, role, id, task_id], ...]): a
    # server on `--store memory` keeps its tasks in no table.
    " AND NOT EXISTS (SELECT 1 FROM json_each(?3) l"
    " WHERE json_extract(l.value, '$[0]') = {table}.swarm_name"
    " AND json_extract(l.value, '$[1]') = {table}.caller_role"
    " AND json_extract(l.value, '$[2]') = {table}.caller_id"
    " AND json_extract(l.value, '$[3]') = json_extract({table}.record, '$.task_id'))"
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
    conn: sqlite3.Connection, table: str, condition: str, cutoff: str, after: int, *live: str
) -> tuple[int, int]:
    """One batch of `table`'s expired rows past rowid `after`: (rows removed, the rowid to
    go on after). Each batch goes on where the last one stopped: rows that stay though
    older than the cutoff (a live task's) are read once per prune, not once per batch."""
    with transaction(conn):
        removed = conn.execute(
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE rowid > ?2"
            f" AND ({condition}) ORDER BY rowid LIMIT {TEAM_PRUNE_BATCH}) RETURNING rowid",
            (cutoff, after, *live),
        ).fetchall()
    return len(removed), max((row[0] for row in removed), default=after)


class SqliteTeamStore(SqlTeamStore):
    _EMPTY_DATA = "X''"
    _THREAD_ORDER = "created_at, rowid"

    def __init__(self, path: str | Path = MEMORY) -> None:
        """`path`: the server's database file; by default (`MEMORY`) a private in-memory
        database, ready without `start` and gone with the store (`--store memory`)."""
        self.db = open_database(path)
        self.sql = SqliteSql(self.db)
        self._started = False
        self._direct = self.db.in_memory
        if not self._direct:
            self._init_writes(is_transient_error)

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True
            if not self._direct:
                self.writes.start()

    async def close(self) -> None:
        if self._started:
            self._started = False
            if not self._direct:
                await self.writes.close()
            await self.db.release()

    def _created_at(self) -> str:
        return utc_now()

    # -- lifecycle -------------------------------------------------------------------
    async def stored_bytes(self, key: InstanceKey) -> int:
        return int(await self._value(_SIZES, *key_tuple(key)) or 0)

    async def prune_before(
        self, cutoff: datetime.datetime, live_tasks: Collection[tuple[InstanceKey, str]] = ()
    ) -> int:
        text = cutoff_text(cutoff)
        live = json.dumps([[*key_tuple(key), task_id] for key, task_id in live_tasks])
        removed = 0
        for table, condition in _EXPIRED:
            task_live = (live,) if table in _OF_TASKS else ()
            if table in _OF_TASKS:
                condition += _TASK_LIVE.format(table=table)
            after = -(1 << 63)  # the lowest rowid (each of these tables has one)
            while True:  # a batch per transaction: the task store's writes go on in between
                count, after = await self.db.run(
                    _prune_step, table, condition, text, after, *task_live
                )
                removed += count
                if count < TEAM_PRUNE_BATCH:
                    break
        return removed
