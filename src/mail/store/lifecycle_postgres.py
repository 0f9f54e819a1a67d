"""`TaskLifecycle` of the PostgreSQL store, on the store's connection pool.

Removal runs in batches of at most `PRUNE_BATCH` tasks, one transaction each, under a
transaction-scoped advisory lock: several servers on one database (cluster mode) take turns
instead of deleting the same rows at once. PostgreSQL keeps the freed space for new rows
(autovacuum marks it reusable); the files do not shrink without `VACUUM FULL`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from mail.store.base import (
    IDEMPOTENCY_TABLE as KEYS_TABLE,
)
from mail.store.base import (
    STREAMED_OUTCOME,
    InstanceKey,
    InstanceSnapshot,
    parse_start_time,
)
from mail.store.lifecycle import (
    FINISHED_STATES_SQL,
    PRUNE_BATCH,
    TASK_CONTENT,
    TASK_TABLES,
    Cursor,
    PruneReport,
    TaskLifecycle,
    batch_by_bytes,
    queue_keys,
    task_of_queue_key,
)
from mail.store.pg_unreachable import unavailable_when_unreachable
from mail.store.postgres import _isoformat, _pg_json
from mail.store.sql_reads import _SNAPSHOT_READS, _TASK_COLUMNS, add_snapshot_row, task_from_row

_KEY = "swarm_name = $1 AND caller_role = $2 AND caller_id = $3"
_IDS = "task_id = ANY($4::text[])"
_PRUNE_LOCK_ID = 0x4D41494D  # "MAIM": one pruner at a time per database

_FINISHED = f"""NOT COALESCE(is_running, FALSE) AND COALESCE(metadata->>'state',
    CASE WHEN NOT COALESCE(completed, FALSE) THEN 'stopped'
         WHEN jsonb_array_length(COALESCE(metadata->'breakpoint_calls', '[]'::jsonb)) > 0
           OR jsonb_array_length(COALESCE(metadata->'pending_reviews', '[]'::jsonb)) > 0
         THEN 'paused' ELSE 'completed' END) IN {FINISHED_STATES_SQL}"""

_RUNNING_CALLERS_SQL = """
    SELECT caller_role, caller_id FROM tasks
    WHERE swarm_name = $1 AND COALESCE(is_running, FALSE)
      AND COALESCE(metadata->>'state', 'running') = 'running'
    GROUP BY caller_role, caller_id ORDER BY MIN(start_time) LIMIT $2"""

_RECORDS_SELECT = f"""
    SELECT {_TASK_COLUMNS},
           (SELECT count(*) FROM task_events e WHERE e.swarm_name = t.swarm_name
              AND e.caller_role = t.caller_role AND e.caller_id = t.caller_id
              AND e.task_id = t.task_id) AS event_count
    FROM tasks t WHERE {_KEY}"""
_RECORDS_SQL = f"{_RECORDS_SELECT} ORDER BY start_time, created_at"
_PAGE_SQL = f"""{_RECORDS_SELECT}
      AND ($4::timestamptz IS NULL OR start_time < $4
           OR (start_time = $4 AND task_id < $5::text))
    ORDER BY start_time DESC, task_id DESC LIMIT $6"""

# The task tables of the connection's search path (views over another layout left out).
_TABLES_SQL = """
    SELECT c.relname FROM pg_class c
    WHERE c.relkind IN ('r', 'p') AND c.relname = ANY($1::text[]) AND pg_table_is_visible(c.oid)
"""

_EXPIRED_SQL = f"""
    SELECT swarm_name, caller_role, caller_id, task_id,
           (metadata #>> '{{summary,stored_bytes}}')::bigint AS size,
           metadata #>> '{{files}}' AS files
    FROM tasks WHERE updated_at < $1 AND {_FINISHED} LIMIT {PRUNE_BATCH}
"""

_BY_TASK = "(swarm_name, caller_role, caller_id, task_id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))"

# The idempotency keys of a task go with it (see lifecycle_sqlite's `_KEYS_OF_REMOVED_SQL`):
# counted as its bytes, and reduced to the mark that they were answered when it is removed.
_HAS_KEYS_SQL = f"SELECT to_regclass('{KEYS_TABLE}') IS NOT NULL"
_KEY_SIZES_SQL = f"""
    SELECT subject, sum(COALESCE(octet_length(body), 0) + octet_length(context)) AS n FROM {KEYS_TABLE}
    WHERE {_KEY} AND subject = ANY($4::text[]) GROUP BY subject"""
_KEYS_OF_REMOVED_SQL = f"""
    UPDATE {KEYS_TABLE} SET status = 200, content_type = $5, body = ''::bytea
    WHERE (swarm_name, caller_role, caller_id, subject) IN
          (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))"""


# A request reading stored tasks while PostgreSQL is away: 503 + Retry-After, not 500.
_reachable = unavailable_when_unreachable("the stored tasks")


def _wanted(table: str, task_ids: Sequence[str]) -> list[str]:
    """The `_IDS` argument of `table`'s rows of these tasks: `task_queues` keeps a task's
    rows under its id and suffixed keys (`queue_keys`), every other table under its id."""
    return queue_keys(task_ids) if table == "task_queues" else list(task_ids)


class PostgresLifecycle(TaskLifecycle):
    def _pool(self) -> Any:
        pool = self.store._pool  # type: ignore[attr-defined]
        if pool is None:
            from mail.store.base import StoreUnavailableError

            raise StoreUnavailableError("the PostgreSQL store is not started")
        return pool

    @_reachable
    async def records(
        self, key: InstanceKey, *, limit: int | None = None, before: Cursor | None = None
    ) -> dict[str, dict[str, Any]]:
        await self._settle()
        out: dict[str, dict[str, Any]] = {}
        args: tuple[Any, ...]
        if limit is None:
            sql, args = _RECORDS_SQL, _key(key)
        else:
            start = parse_start_time(before[0]) if before else None
            sql, args = _PAGE_SQL, (*_key(key), start, before[1] if before else None, limit)
        async with self._pool().acquire() as conn:
            for row in await conn.fetch(sql, *args):
                record = task_from_row(row, _isoformat)
                record["event_count"] = int(row["event_count"])
                out[row["task_id"]] = record
        return out

    @_reachable
    async def load_tasks(self, key: InstanceKey, task_ids: Sequence[str]) -> InstanceSnapshot:
        await self._settle()
        snapshot = InstanceSnapshot()
        async with self._pool().acquire() as conn:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                sql = (
                    f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {_KEY} AND {_IDS} ORDER BY start_time"
                )
                for row in await conn.fetch(sql, *_key(key), list(task_ids)):
                    add_snapshot_row(snapshot, "tasks", row, _isoformat)
                for table, columns, order in _SNAPSHOT_READS:
                    sql = f"SELECT {columns} FROM {table} WHERE {_KEY} AND {_IDS}{order}"
                    for row in await conn.fetch(sql, *_key(key), _wanted(table, task_ids)):
                        add_snapshot_row(snapshot, table, row, _isoformat)
        return snapshot

    @_reachable
    async def owners(self, task_id: str) -> list[InstanceKey]:
        await self._settle()
        async with self._pool().acquire() as conn:
            rows = await conn.fetch(
                "SELECT swarm_name, caller_role, caller_id FROM tasks WHERE task_id = $1", task_id
            )
        return [InstanceKey(*row) for row in rows]

    @_reachable
    async def callers(self, swarm_name: str, caller_role: str) -> list[str]:
        await self._settle()
        async with self._pool().acquire() as conn:
            rows = await conn.fetch(
                "SELECT DISTINCT caller_id FROM tasks WHERE swarm_name = $1 AND caller_role = $2",
                swarm_name,
                caller_role,
            )
        return [str(row[0]) for row in rows]

    @_reachable
    async def running_callers(self, swarm_name: str, limit: int) -> list[InstanceKey]:
        await self._settle()
        async with self._pool().acquire() as conn:
            rows = await conn.fetch(_RUNNING_CALLERS_SQL, swarm_name, limit)
        return [InstanceKey(swarm_name, str(row[0]), str(row[1])) for row in rows]

    @_reachable
    async def save_summaries(self, key: InstanceKey, summaries: dict[str, dict[str, Any]]) -> None:
        if not summaries:
            return
        await self._settle()
        rows = [(*_key(key), t, _pg_json({"summary": s})) for t, s in summaries.items()]
        async with self._pool().acquire() as conn:
            await conn.executemany(
                "UPDATE tasks SET metadata = COALESCE(metadata, '{}'::jsonb) || $5::jsonb"
                f" WHERE {_KEY} AND task_id = $4",
                rows,
            )

    @_reachable
    async def task_bytes(self, key: InstanceKey, task_ids: Sequence[str]) -> dict[str, int]:
        if not task_ids:
            return {}
        await self._settle()
        sizes = dict.fromkeys(task_ids, 0)
        async with self._pool().acquire() as conn:
            for table in await _tables(conn):
                size = f"octet_length({TASK_CONTENT[table]}::text)"
                sql = (
                    f"SELECT task_id, sum({size}) AS n FROM {table}"
                    f" WHERE {_KEY} AND {_IDS} GROUP BY task_id"
                )
                for row in await conn.fetch(sql, *_key(key), _wanted(table, task_ids)):
                    owner = task_of_queue_key(row["task_id"])
                    if owner in sizes:
                        sizes[owner] += int(row["n"] or 0)
            if await conn.fetchval(_HAS_KEYS_SQL):
                for row in await conn.fetch(_KEY_SIZES_SQL, *_key(key), list(task_ids)):
                    sizes[row["subject"]] += int(row["n"] or 0)
        return sizes

    async def _prune_batch(self, cutoff: _dt.datetime) -> PruneReport:
        report = PruneReport()
        async with self._pool().acquire() as conn:
            async with conn.transaction():
                if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _PRUNE_LOCK_ID):
                    return report  # another server is pruning this database now
                rows = batch_by_bytes([tuple(r) for r in await conn.fetch(_EXPIRED_SQL, cutoff)], 4)
                if not rows:
                    return report
                tasks = [(InstanceKey(*row[:3]), str(row[3])) for row in rows]
                for row in rows:
                    report.add_files(row[5])
                columns: list[list[str]] = [[], [], [], []]
                for key, task_id in tasks:
                    for queue_key in queue_keys([task_id]):
                        for column, value in zip(columns, (*_key(key), queue_key), strict=True):
                            column.append(value)
                for table in await _tables(conn):
                    status = await conn.execute(f"DELETE FROM {table} WHERE {_BY_TASK}", *columns)
                    report.rows += _count(status)
                if await conn.fetchval(_HAS_KEYS_SQL):
                    keys = [[*_key(k), t] for k, t in tasks]
                    await conn.execute(
                        _KEYS_OF_REMOVED_SQL, *map(list, zip(*keys, strict=True)), STREAMED_OUTCOME
                    )
                report.tasks = tasks
                report.batches = 1
        return report


async def _tables(conn: Any) -> list[str]:
    found = {row[0] for row in await conn.fetch(_TABLES_SQL, list(TASK_TABLES))}
    return [table for table in TASK_TABLES if table in found]


def _key(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)


def _count(status: str) -> int:
    try:
        return int(status.rsplit(" ", 1)[-1])
    except (ValueError, AttributeError):
        return 0
