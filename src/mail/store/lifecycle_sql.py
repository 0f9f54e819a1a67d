"""The `TaskLifecycle` reads SQLite and PostgreSQL share, in one SQL text (`mail.store.sql`):
`lifecycle_sqlite` and `lifecycle_postgres` hold the rest (sizes, summaries, the prune)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mail.store.base import InstanceKey, InstanceSnapshot
from mail.store.lifecycle import Cursor, TaskLifecycle, queue_keys
from mail.store.sql import Sql, SqlConn
from mail.store.sql_reads import _SNAPSHOT_READS, _TASK_COLUMNS, add_snapshot_row, task_from_row

_KEY = "swarm_name = ?1 AND caller_role = ?2 AND caller_id = ?3"
_IDS = "task_id = ANY(?4)"


def _wanted(table: str, task_ids: Sequence[str]) -> list[str]:
    """The `_IDS` argument of `table`'s rows of these tasks: `task_queues` keeps a task's
    rows under its id and suffixed keys (`queue_keys`), every other table under its id."""
    return queue_keys(task_ids) if table == "task_queues" else list(task_ids)


def key_args(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)


class SqlLifecycle(TaskLifecycle):
    """Records, snapshots and owners; each database supplies these few spellings:"""

    _TIME: str  # the SQL type of start_time
    _INSERTION: str  # what orders tasks that started at once: the order they were stored in
    _STATE: str  # the record's state (metadata's "state")

    @property
    def sql(self) -> Sql:
        raise NotImplementedError

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
            f" AND COALESCE({self._STATE}, 'running') = 'running'"
            " GROUP BY caller_role, caller_id ORDER BY MIN(start_time) LIMIT ?",
            swarm_name,
            limit,
        )
        return [InstanceKey(swarm_name, str(row[0]), str(row[1])) for row in rows]
