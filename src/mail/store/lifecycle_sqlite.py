"""`TaskLifecycle` of the SQLite store: its statements run on the database's one thread."""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from mail.store.base import (
    IDEMPOTENCY_TABLE as KEYS_TABLE,
)
from mail.store.base import (
    STREAMED_OUTCOME,
    InstanceKey,
    normalize_start_time,
    to_json,
)
from mail.store.lifecycle import (
    FINISHED_STATES_SQL,
    PRUNE_BATCH,
    TASK_CONTENT,
    TASK_TABLES,
    PruneReport,
    SpaceReport,
    batch_by_bytes,
    queue_keys,
    task_of_queue_key,
)
from mail.store.lifecycle_sql import SqlLifecycle
from mail.store.sql import SqliteSql
from mail.store.sqlite_schema import transaction
from mail.store.sqlite_space import (
    VACUUM_STEP_PAGES,
    file_bytes,
    space_report,
    truncate_wal,
    vacuum_step,
)

_KEY = "swarm_name = ? AND caller_role = ? AND caller_id = ?"
_IDS = "task_id IN (SELECT value FROM json_each(?))"

# A record is finished when it neither runs nor waits (lifecycle.record_is_finished in SQL).
_FINISHED = f"""is_running = 0 AND COALESCE(json_extract(metadata, '$.state'),
    CASE WHEN completed = 0 THEN 'stopped'
         WHEN json_array_length(COALESCE(json_extract(metadata, '$.breakpoint_calls'), '[]')) > 0
           OR json_array_length(COALESCE(json_extract(metadata, '$.pending_reviews'), '[]')) > 0
         THEN 'paused' ELSE 'completed' END) IN {FINISHED_STATES_SQL}"""


_EXPIRED_SQL = f"""
    SELECT swarm_name, caller_role, caller_id, task_id,
           json_extract(metadata, '$.summary.stored_bytes') AS size,
           json_extract(metadata, '$.files') AS files
    FROM tasks WHERE updated_at < ? AND {_FINISHED} LIMIT {PRUNE_BATCH}
"""


# Filtered by SQLite, not in Python: a file has some 40 schema rows (indexes, the webhook,
# team and idempotency tables), and finished tasks are measured several times a second.
_TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (SELECT value FROM json_each(?))"
_TABLE_NAMES = json.dumps(TASK_TABLES)

# The idempotency keys that started or continued a task go with it: their outcomes (an
# answer with its events, twice the size of a `show_events` message) are counted as the
# task's bytes, and when the task is removed each key keeps only the mark that it was
# answered (`STREAMED_OUTCOME`, no body: resolved from the task, which is gone), so a repeat
# is told the task was removed instead of running the message a second time. The mark
# lasts as long as the key (`idempotency_key_ttl`).
_KEYS_OF_REMOVED_SQL = f"""
    UPDATE {KEYS_TABLE} SET status = 200, content_type = ?, body = X''
    WHERE {_KEY} AND subject IN (SELECT value FROM json_each(?))"""
_KEY_SIZES_SQL = f"""
    SELECT subject, sum(COALESCE(length(CAST(body AS BLOB)), 0) + length(context)) FROM {KEYS_TABLE}
    WHERE {_KEY} AND subject IN (SELECT value FROM json_each(?)) GROUP BY subject"""
_HAS_KEYS_SQL = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"


def _tables(conn: sqlite3.Connection) -> list[str]:
    """The task tables this file has (as tables: a view over another layout is skipped)."""
    found = {row[0] for row in conn.execute(_TABLES_SQL, (_TABLE_NAMES,))}
    return [table for table in TASK_TABLES if table in found]


def _wanted(table: str, ids: list[str]) -> str:
    """The `_IDS` argument of `table`'s rows of these tasks: `task_queues` keeps a task's
    rows under its id and suffixed keys (`queue_keys`), every other table under its id."""
    return json.dumps(queue_keys(ids) if table == "task_queues" else ids)


# The record's `summary` key replaced by SQLite's own JSON code: the same shallow merge as
# `mail_merge(metadata, '{"summary": ...}')`, without a call into Python per row.
_SUMMARY_SQL = (
    "UPDATE tasks SET metadata = json_set(COALESCE(NULLIF(metadata, ''), '{}'), '$.summary',"
    f" json(?)) WHERE {_KEY} AND task_id = ?"
)


def _save_summaries(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    with transaction(conn):
        conn.executemany(_SUMMARY_SQL, rows)


def _sizes(conn: sqlite3.Connection, key: tuple[str, ...], ids: list[str]) -> dict[str, int]:
    sizes = dict.fromkeys(ids, 0)
    for table in _tables(conn):
        column = TASK_CONTENT[table]
        sql = (
            f"SELECT task_id, sum(length(CAST({column} AS BLOB))) FROM {table}"
            f" WHERE {_KEY} AND {_IDS} GROUP BY task_id"
        )
        for task_id, size in conn.execute(sql, (*key, _wanted(table, ids))):
            owner = task_of_queue_key(task_id)
            if owner in sizes:
                sizes[owner] += int(size or 0)
    if conn.execute(_HAS_KEYS_SQL, (KEYS_TABLE,)).fetchone() is not None:
        for task_id, size in conn.execute(_KEY_SIZES_SQL, (*key, json.dumps(ids))):
            sizes[task_id] += int(size or 0)
    return sizes


def _prune(conn: sqlite3.Connection, cutoff: str) -> PruneReport:
    report = PruneReport(batches=1)
    with transaction(conn):
        rows = batch_by_bytes(conn.execute(_EXPIRED_SQL, (cutoff,)).fetchall(), 4)
        if not rows:
            report.batches = 0
            return report
        tasks = [(InstanceKey(*row[:3]), str(row[3])) for row in rows]
        for row in rows:
            report.add_files(row[5])
        for table in _tables(conn):
            args = [
                (k.swarm_name, k.caller_role, k.caller_id, _wanted(table, [task_id]))
                for k, task_id in tasks
            ]
            before = conn.total_changes
            conn.executemany(f"DELETE FROM {table} WHERE {_KEY} AND {_IDS}", args)
            report.rows += conn.total_changes - before
        if conn.execute(_HAS_KEYS_SQL, (KEYS_TABLE,)).fetchone() is not None:
            by_caller: dict[InstanceKey, list[str]] = {}
            for key, task_id in tasks:
                by_caller.setdefault(key, []).append(task_id)
            conn.executemany(
                _KEYS_OF_REMOVED_SQL,
                [(STREAMED_OUTCOME, *_key(k), json.dumps(ids)) for k, ids in by_caller.items()],
            )
        report.tasks = tasks
    return report


class SqliteLifecycle(SqlLifecycle):
    _TIME = "TEXT"
    _INSERTION = "rowid"
    _STATE = "json_extract(metadata, '$.state')"

    @property
    def _db(self) -> Any:
        return self.store.db  # type: ignore[attr-defined]

    @property
    def sql(self) -> SqliteSql:
        return SqliteSql(self._db)

    def _start_text(self, value: Any) -> str:
        return normalize_start_time(value)

    async def save_summaries(self, key: InstanceKey, summaries: dict[str, dict[str, Any]]) -> None:
        if not summaries:
            return
        await self._settle()
        rows = [(to_json(s), *_key(key), t) for t, s in summaries.items()]
        await self._db.run(_save_summaries, rows)

    async def task_bytes(self, key: InstanceKey, task_ids: Sequence[str]) -> dict[str, int]:
        if not task_ids:
            return {}
        await self._settle()
        return await self._db.run(_sizes, _key(key), list(task_ids))  # type: ignore[no-any-return]

    async def _prune_batch(self, cutoff: _dt.datetime) -> PruneReport:
        return await self._db.run(_prune, normalize_start_time(cutoff))  # type: ignore[no-any-return]

    async def reclaim_space(self, max_pages: int | None = None) -> int:
        # Step by step: the store's write batches run on the same thread in between.
        before = await self._db.run(file_bytes)
        done = 0
        while max_pages is None or done < max_pages:
            step = (
                VACUUM_STEP_PAGES if max_pages is None else min(VACUUM_STEP_PAGES, max_pages - done)
            )
            left = await self._db.run(vacuum_step, step)
            done += step
            if not left:
                break
        await self._db.run(truncate_wal)
        return max(0, before - await self._db.run(file_bytes))  # type: ignore[no-any-return]

    async def space(self) -> SpaceReport:
        await self._settle()
        return await self._db.run(space_report)  # type: ignore[no-any-return]


def _key(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)
