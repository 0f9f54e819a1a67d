"""The `TaskLifecycle` of SQLite and PostgreSQL, in one SQL text (`mail.store.sql`):
`lifecycle_sqlite` and `lifecycle_postgres` hold what each spells its own way."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from mail.store.base import IDEMPOTENCY_TABLE as KEYS_TABLE
from mail.store.base import (
    STREAMED_OUTCOME,
    InstanceKey,
    InstanceSnapshot,
    normalize_start_time,
    to_json,
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
from mail.store.sql import Sql, SqlConn, json_field, octets
from mail.store.sql_reads import _SNAPSHOT_READS, _TASK_COLUMNS, add_snapshot_row, task_from_row

_KEY = "swarm_name = ?1 AND caller_role = ?2 AND caller_id = ?3"
_IDS = "task_id = ANY(?4)"
_PRUNE_LOCK_ID = 0x4D41494D  # "MAIM": one pruner at a time per PostgreSQL database


def finished_sql(postgres: bool) -> str:
    """A task row is finished when it neither runs nor waits (`record_is_finished` in SQL)."""

    def waits(name: str) -> str:
        if postgres:
            return f"jsonb_array_length(COALESCE(metadata->'{name}', '[]'::jsonb)) > 0"
        return f"json_array_length(COALESCE({json_field(False, 'metadata', name)}, '[]')) > 0"

    return (
        "NOT COALESCE(is_running, FALSE) AND"
        f" COALESCE({json_field(postgres, 'metadata', 'state')}, CASE WHEN NOT"
        " COALESCE(completed, FALSE) THEN 'stopped'"
        f" WHEN {waits('breakpoint_calls')} OR {waits('pending_reviews')}"
        f" THEN 'paused' ELSE 'completed' END) IN {FINISHED_STATES_SQL}"
    )


# The idempotency keys that started or continued a task go with it: their outcomes (an
# answer with its events, twice the size of a `show_events` message) are counted as the
# task's bytes, and when the task is removed each key keeps only the mark that it was
# answered (`STREAMED_OUTCOME`, no body: resolved from the task, which is gone), so a repeat
# is told the task was removed instead of running the message a second time. The mark
# lasts as long as the key (`idempotency_key_ttl`).
_KEYS_OF_REMOVED_SQL = (
    f"UPDATE {KEYS_TABLE} SET status = 200, content_type = ?5, body = ?6"
    f" WHERE {_KEY} AND subject = ANY(?4)"
)


def _wanted(table: str, task_ids: Sequence[str]) -> list[str]:
    """The `_IDS` argument of `table`'s rows of these tasks: `task_queues` keeps a task's
    rows under its id and suffixed keys (`queue_keys`), every other table under its id."""
    return queue_keys(task_ids) if table == "task_queues" else list(task_ids)


def key_args(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)


class SqlLifecycle(TaskLifecycle):
    """Each database supplies these few spellings:"""

    postgres: bool
    _TIME: str  # the SQL type of start_time
    _INSERTION: str  # what orders tasks that started at once: the order they were stored in
    _WITH_SUMMARY: str  # the metadata with ?5 (JSON text) as its "summary"
    _KEY_BYTES: str  # the bytes of an idempotency key's row
    _json = staticmethod(to_json)  # a value as JSON text the database takes

    def _sql(self, unavailable: str | None) -> Sql:
        """The database; `unavailable`: see `Sql`."""
        raise NotImplementedError

    @property
    def sql(self) -> Sql:
        # A request reading stored tasks while the database is away: 503 + Retry-After.
        return self._sql("the database of the stored tasks cannot be reached now")

    def _start_text(self, value: Any) -> str:
        """A start_time column value as ISO 8601 text."""
        raise NotImplementedError

    def _start_arg(self, text: str) -> Any:
        """ISO 8601 text as a start_time parameter."""
        return text

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        await self._settle()
        return await self.sql.run(lambda c: c.fetch(sql, *args))

    async def records(
        self, key: InstanceKey, *, limit: int | None = None, before: Cursor | None = None
    ) -> dict[str, dict[str, Any]]:
        select = (
            f"SELECT {_TASK_COLUMNS}, (SELECT count(*) FROM task_events e"
            " WHERE e.swarm_name = t.swarm_name AND e.caller_role = t.caller_role"
            " AND e.caller_id = t.caller_id AND e.task_id = t.task_id) AS event_count"
            f" FROM tasks t WHERE {_KEY}"
        )
        if limit is None:
            rows = await self._fetch(
                f"{select} ORDER BY start_time, {self._INSERTION}", *key_args(key)
            )
        else:
            start = f"CAST(?4 AS {self._TIME})"
            rows = await self._fetch(
                f"{select} AND ({start} IS NULL OR start_time < {start}"
                f" OR (start_time = {start} AND task_id < ?5))"
                " ORDER BY start_time DESC, task_id DESC LIMIT ?6",
                *key_args(key),
                self._start_arg(before[0]) if before else None,
                before[1] if before else None,
                limit,
            )
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            record = task_from_row(row, self._start_text)
            record["event_count"] = int(row["event_count"])
            out[row["task_id"]] = record
        return out

    async def load_tasks(self, key: InstanceKey, task_ids: Sequence[str]) -> InstanceSnapshot:
        async def load(c: SqlConn) -> InstanceSnapshot:
            snapshot = InstanceSnapshot()
            async with c.snapshot():  # one consistent read
                sql = (
                    f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {_KEY} AND {_IDS} ORDER BY start_time"
                )
                for row in await c.fetch(sql, *key_args(key), list(task_ids)):
                    add_snapshot_row(snapshot, "tasks", row, self._start_text)
                for table, columns, order in _SNAPSHOT_READS:
                    sql = f"SELECT {columns} FROM {table} WHERE {_KEY} AND {_IDS}{order}"
                    for row in await c.fetch(sql, *key_args(key), _wanted(table, task_ids)):
                        add_snapshot_row(snapshot, table, row, self._start_text)
            return snapshot

        await self._settle()
        return await self.sql.run(load)

    async def owners(self, task_id: str) -> list[InstanceKey]:
        rows = await self._fetch(
            "SELECT swarm_name, caller_role, caller_id FROM tasks WHERE task_id = ?", task_id
        )
        return [InstanceKey(*row) for row in rows]

    async def callers(self, swarm_name: str, caller_role: str) -> list[str]:
        rows = await self._fetch(
            "SELECT DISTINCT caller_id FROM tasks WHERE swarm_name = ? AND caller_role = ?",
            swarm_name,
            caller_role,
        )
        return [str(row[0]) for row in rows]

    async def running_callers(self, swarm_name: str, limit: int) -> list[InstanceKey]:
        rows = await self._fetch(
            "SELECT caller_role, caller_id FROM tasks WHERE swarm_name = ? AND is_running = TRUE"
            f" AND COALESCE({json_field(self.postgres, 'metadata', 'state')}, 'running')"
            " = 'running'"
            " GROUP BY caller_role, caller_id ORDER BY MIN(start_time) LIMIT ?",
            swarm_name,
            limit,
        )
        return [InstanceKey(swarm_name, str(row[0]), str(row[1])) for row in rows]

    async def save_summaries(self, key: InstanceKey, summaries: dict[str, dict[str, Any]]) -> None:
        if not summaries:
            return
        sql = f"UPDATE tasks SET metadata = {self._WITH_SUMMARY} WHERE {_KEY} AND task_id = ?4"
        rows = [(*key_args(key), t, self._json(s)) for t, s in summaries.items()]

        async def save(c: SqlConn) -> None:
            async with c.transaction():
                await c.executemany(sql, rows)

        await self._settle()
        await self.sql.run(save)

    async def task_bytes(self, key: InstanceKey, task_ids: Sequence[str]) -> dict[str, int]:
        if not task_ids:
            return {}

        async def measure(c: SqlConn) -> dict[str, int]:
            sizes = dict.fromkeys(task_ids, 0)
            for table in await c.tables(TASK_TABLES):
                size = octets(c.postgres, TASK_CONTENT[table])
                sql = (
                    f"SELECT task_id, sum({size}) FROM {table}"
                    f" WHERE {_KEY} AND {_IDS} GROUP BY task_id"
                )
                for task_id, n in await c.fetch(sql, *key_args(key), _wanted(table, task_ids)):
                    owner = task_of_queue_key(task_id)
                    if owner in sizes:
                        sizes[owner] += int(n or 0)
            if await c.tables([KEYS_TABLE]):
                sql = (
                    f"SELECT subject, sum({self._KEY_BYTES}) FROM {KEYS_TABLE}"
                    f" WHERE {_KEY} AND subject = ANY(?4) GROUP BY subject"
                )
                for subject, n in await c.fetch(sql, *key_args(key), list(task_ids)):
                    sizes[subject] += int(n or 0)
            return sizes

        await self._settle()
        return await self.sql.run(measure)

    async def _prune_batch(self, cutoff: _dt.datetime) -> PruneReport:
        expired = (
            "SELECT swarm_name, caller_role, caller_id, task_id,"
            f" CAST({json_field(self.postgres, 'metadata', 'summary', 'stored_bytes')} AS BIGINT),"
            f" {json_field(self.postgres, 'metadata', 'files')} FROM tasks"
            f" WHERE updated_at < ?1 AND {finished_sql(self.postgres)} LIMIT {PRUNE_BATCH}"
        )

        async def prune(c: SqlConn) -> PruneReport:
            report = PruneReport()
            async with c.transaction():
                lock = "SELECT pg_try_advisory_xact_lock(?)"
                if c.postgres and not await c.fetchval(lock, _PRUNE_LOCK_ID):
                    return report  # another server is pruning this database now
                cutoff_arg = self._start_arg(normalize_start_time(cutoff))
                rows = batch_by_bytes([tuple(r) for r in await c.fetch(expired, cutoff_arg)], 4)
                if not rows:
                    return report
                report.tasks = [(InstanceKey(*row[:3]), str(row[3])) for row in rows]
                for row in rows:
                    report.add_files(row[5])
                by_caller: dict[InstanceKey, list[str]] = {}
                for k, task_id in report.tasks:
                    by_caller.setdefault(k, []).append(task_id)
                for table in await c.tables(TASK_TABLES):
                    for k, ids in by_caller.items():
                        report.rows += await c.execute(
                            f"DELETE FROM {table} WHERE {_KEY} AND {_IDS}",
                            *key_args(k),
                            _wanted(table, ids),
                        )
                if await c.tables([KEYS_TABLE]):
                    for k, ids in by_caller.items():
                        await c.execute(
                            _KEYS_OF_REMOVED_SQL, *key_args(k), ids, STREAMED_OUTCOME, b""
                        )
                report.batches = 1
            return report

        return await self._sql(None).run(prune)
