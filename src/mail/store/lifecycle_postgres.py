"""`TaskLifecycle` of the PostgreSQL store, on the store's connection pool."""

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
    parse_start_time,
)
from mail.store.lifecycle import (
    FINISHED_STATES_SQL,
    PRUNE_BATCH,
    TASK_CONTENT,
    TASK_TABLES,
    PruneReport,
    batch_by_bytes,
    queue_keys,
    task_of_queue_key,
)
from mail.store.lifecycle_sql import SqlLifecycle, _wanted
from mail.store.pg_unreachable import unavailable_when_unreachable
from mail.store.postgres import _isoformat, _pg_json
from mail.store.sql import PostgresSql

_KEY = "swarm_name = $1 AND caller_role = $2 AND caller_id = $3"
_IDS = "task_id = ANY($4::text[])"
_PRUNE_LOCK_ID = 0x4D41494D  # "MAIM": one pruner at a time per database

_FINISHED = f"""NOT COALESCE(is_running, FALSE) AND COALESCE(metadata->>'state',
    CASE WHEN NOT COALESCE(completed, FALSE) THEN 'stopped'
         WHEN jsonb_array_length(COALESCE(metadata->'breakpoint_calls', '[]'::jsonb)) > 0
           OR jsonb_array_length(COALESCE(metadata->'pending_reviews', '[]'::jsonb)) > 0
         THEN 'paused' ELSE 'completed' END) IN {FINISHED_STATES_SQL}"""

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


class PostgresLifecycle(SqlLifecycle):
    _TIME = "timestamptz"
    _INSERTION = "created_at"
    _STATE = "metadata->>'state'"

    def _pool(self) -> Any:
        pool = self.store._pool  # type: ignore[attr-defined]
        if pool is None:
            from mail.store.base import StoreUnavailableError

            raise StoreUnavailableError("the PostgreSQL store is not started")
        return pool

    @property
    def sql(self) -> PostgresSql:
        # A request reading stored tasks while PostgreSQL is away: 503 + Retry-After, not 500.
        return PostgresSql(self._pool, "the database of the stored tasks cannot be reached now")

    def _start_text(self, value: Any) -> str:
        return _isoformat(value)

    def _start_arg(self, text: str) -> Any:
        return parse_start_time(text)

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
