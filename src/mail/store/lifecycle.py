"""Finished tasks in a store: read back, listed, measured, removed when they expire, and the
space the SQLite file takes and gives back.

`TaskLifecycle` runs one SQL text on either database (`mail.store.sql`); the few spellings
that differ are `_SPELLINGS`, picked by the store's backend."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from mail.store.records import (
    FINISHED_STATES,
    STREAMED_OUTCOME,
    InstanceKey,
    InstanceSnapshot,
    StoreUnavailableError,
    normalize_start_time,
)
from mail.store.records import IDEMPOTENCY_TABLE as KEYS_TABLE
from mail.store.sql import PostgresSql, Sql, SqlConn, SqliteSql, json_field, octets
from mail.store.sql_batch import key_args
from mail.store.sql_reads import _SNAPSHOT_READS, _TASK_COLUMNS, add_snapshot_row, task_from_row
from mail.store.sqlite_space import (
    VACUUM_STEP_PAGES,
    SpaceReport,
    file_bytes,
    space_report,
    truncate_wal,
    vacuum_step,
)

if TYPE_CHECKING:
    from mail.store.base import TaskStore

# The same, as a SQL list for the stores' `_FINISHED` conditions.
FINISHED_STATES_SQL = "(" + ", ".join(f"'{state}'" for state in FINISHED_STATES) + ")"
JOURNAL_SUFFIX = "::journal"  # a running task's journal row in task_queues (runtime_durable)
# Peers' answers to a task whose owner's instance was not loaded when they came (after a
# restart), kept until it is: `mail.server.parked_answers`.
PARKED_SUFFIX = "::parked"
# The tables that hold a task's rows (keyed by instance and task id), each with the column
# whose bytes count as the task's, `tasks` last. A table the database lacks is skipped.
TASK_CONTENT: dict[str, str] = {
    "task_events": "event_data",
    "agent_histories": "history",
    "task_responses": "response",
    "task_queues": "items",
    "tasks": "metadata",
}
TASK_TABLES = tuple(TASK_CONTENT)
# Tasks removed per transaction, and the stored bytes after which a batch stops early (a few
# large tasks make a batch of their own, so the writer is never held up for long).
PRUNE_BATCH = 50
PRUNE_BATCH_BYTES = 8 * 1024 * 1024

# A place in a task list, newest first: (start time as ISO 8601 UTC text, task id).
Cursor = tuple[str, str]


@dataclass
class PruneReport:
    """What a `prune` removed: tasks (by instance) and rows of the task and team tables, and
    the files the removed tasks wrote (path -> [size, mtime_ns]; the caller removes them:
    the store does not touch the file system, see `mail.core.file_root.remove_task_files`)."""

    tasks: list[tuple[InstanceKey, str]] = field(default_factory=list)
    rows: int = 0
    team_rows: int = 0
    batches: int = 0
    files: dict[str, Any] = field(default_factory=dict)

    def add(self, other: PruneReport) -> None:
        self.tasks.extend(other.tasks)
        self.rows += other.rows
        self.team_rows += other.team_rows
        self.batches += other.batches
        self.files.update(other.files)

    def add_files(self, listed: Any) -> None:
        """The `files` of a removed task's record (JSON text, or as decoded)."""
        if isinstance(listed, str | bytes):
            try:
                listed = json.loads(listed)
            except ValueError:
                return
        if isinstance(listed, dict):
            self.files.update(listed)


def stored_summary(record: dict[str, Any]) -> dict[str, Any] | None:
    """The summary saved with a task record when it left memory (see `save_summary`)."""
    summary = record.get("summary")
    return summary if isinstance(summary, dict) else None


def record_is_finished(record: dict[str, Any]) -> bool:
    """Whether a stored task record is finished (the SQL `_finished` conditions, in Python)."""
    if record.get("is_running"):
        return False
    state = record.get("state")
    if isinstance(state, str):
        return state in FINISHED_STATES
    if record.get("completed"):
        return not (record.get("breakpoint_calls") or record.get("pending_reviews"))
    return True


def queue_keys(task_ids: Iterable[str]) -> list[str]:
    """The task_queues keys of tasks: their stashed queue, their journal and their parked
    answers (read, sized and removed with the task)."""
    ids = list(task_ids)
    return ids + [t + JOURNAL_SUFFIX for t in ids] + [t + PARKED_SUFFIX for t in ids]


def task_of_queue_key(key: str) -> str:
    for suffix in (JOURNAL_SUFFIX, PARKED_SUFFIX):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def cutoff_for(ttl: float, now: _dt.datetime | None = None) -> _dt.datetime:
    """The time before which a task that last changed is expired, for a TTL in seconds."""
    now = now or _dt.datetime.now(_dt.UTC)
    try:
        return now - _dt.timedelta(seconds=ttl)
    except OverflowError:  # a TTL longer than the calendar: nothing is that old
        return _dt.datetime.min.replace(tzinfo=_dt.UTC)


def batch_by_bytes(rows: Sequence[tuple[Any, ...]], size_index: int) -> list[tuple[Any, ...]]:
    """The first rows whose known sizes add up to `PRUNE_BATCH_BYTES` (at least one)."""
    total = 0
    for count, row in enumerate(rows):
        size = row[size_index]
        total += int(size) if isinstance(size, int | float) else 0
        if total >= PRUNE_BATCH_BYTES:
            return list(rows[: count + 1])
    return list(rows)


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


class _Spelling(NamedTuple):
    time: str  # the SQL type of start_time
    insertion: str  # what orders tasks that started at once: the order they were stored in
    with_summary: str  # the metadata with ?5 (JSON text) as its "summary"
    key_bytes: str  # the bytes of an idempotency key's row


# By `TaskLifecycle.postgres`. SQLite replaces the record's `summary` key with its own JSON
# code: the same shallow merge as `mail_merge(metadata, '{"summary": ...}')`, without a call
# into Python per row.
_SPELLINGS = {
    False: _Spelling(
        "TEXT",
        "rowid",
        "json_set(COALESCE(NULLIF(metadata, ''), '{}'), '$.summary', json(?5))",
        "COALESCE(length(CAST(body AS BLOB)), 0) + length(context)",
    ),
    True: _Spelling(
        "timestamptz",
        "created_at",
        "COALESCE(metadata, '{}'::jsonb) || jsonb_build_object('summary', ?5::jsonb)",
        "COALESCE(octet_length(body), 0) + octet_length(context)",
    ),
}


class TaskLifecycle:
    """Reads, sizes and removal of stored tasks beside one `TaskStore` (SQLite, in memory or
    PostgreSQL): on SQLite its statements run on the database's one thread, on PostgreSQL on
    the store's connection pool."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.postgres = store.backend == "postgres"
        self._spell = _SPELLINGS[self.postgres]

    def _sql(self, unavailable: str | None) -> Sql:
        """The database; `unavailable`: see `Sql` (PostgreSQL only)."""
        if self.postgres:
            return PostgresSql(self._pool, unavailable)
        return SqliteSql(self._db)

    @property
    def _db(self) -> Any:
        return self.store.db  # type: ignore[attr-defined]

    def _pool(self) -> Any:
        pool = self.store._pool  # type: ignore[attr-defined]
        if pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        return pool

    @property
    def sql(self) -> Sql:
        # A request reading stored tasks while the database is away: 503 + Retry-After.
        return self._sql("the database of the stored tasks cannot be reached now")

    async def _settle(self) -> None:
        # What was acknowledged must be visible (and removals must not race queued writes).
        await self.store.settle()

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        await self._settle()
        return await self.sql.run(lambda c: c.fetch(sql, *args))

    async def records(
        self, key: InstanceKey, *, limit: int | None = None, before: Cursor | None = None
    ) -> dict[str, dict[str, Any]]:
        """task_id -> task record (as `load_instance` returns them, metadata merged in) with
        `event_count`: every task of the instance, oldest first; or, with `limit`, a page of
        the newest ones (newest first), before `before` (start time, task id) if given."""
        select = (
            f"SELECT {_TASK_COLUMNS}, (SELECT count(*) FROM task_events e"
            " WHERE e.swarm_name = t.swarm_name AND e.caller_role = t.caller_role"
            " AND e.caller_id = t.caller_id AND e.task_id = t.task_id) AS event_count"
            f" FROM tasks t WHERE {_KEY}"
        )
        if limit is None:
            rows = await self._fetch(
                f"{select} ORDER BY start_time, {self._spell.insertion}", *key_args(key)
            )
        else:
            start = f"CAST(?4 AS {self._spell.time})"
            rows = await self._fetch(
                f"{select} AND ({start} IS NULL OR start_time < {start}"
                f" OR (start_time = {start} AND task_id < ?5))"
                " ORDER BY start_time DESC, task_id DESC LIMIT ?6",
                *key_args(key),
                self.store._start_time(before[0]) if before else None,
                before[1] if before else None,
                limit,
            )
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            record = task_from_row(row, normalize_start_time)
            record["event_count"] = int(row["event_count"])
            out[row["task_id"]] = record
        return out

    async def load_tasks(self, key: InstanceKey, task_ids: Sequence[str]) -> InstanceSnapshot:
        """Everything stored for these tasks of the instance (their journals included)."""

        async def load(c: SqlConn) -> InstanceSnapshot:
            snapshot = InstanceSnapshot()
            async with c.snapshot():  # one consistent read
                sql = (
                    f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {_KEY} AND {_IDS} ORDER BY start_time"
                )
                for row in await c.fetch(sql, *key_args(key), list(task_ids)):
                    add_snapshot_row(snapshot, "tasks", row, normalize_start_time)
                for table, columns, order in _SNAPSHOT_READS:
                    sql = f"SELECT {columns} FROM {table} WHERE {_KEY} AND {_IDS}{order}"
                    for row in await c.fetch(sql, *key_args(key), _wanted(table, task_ids)):
                        add_snapshot_row(snapshot, table, row, normalize_start_time)
            return snapshot

        await self._settle()
        return await self.sql.run(load)

    async def owners(self, task_id: str) -> list[InstanceKey]:
        """The instances that have a task with this id (an operator's lookup)."""
        rows = await self._fetch(
            "SELECT swarm_name, caller_role, caller_id FROM tasks WHERE task_id = ?", task_id
        )
        return [InstanceKey(*row) for row in rows]

    async def callers(self, swarm_name: str, caller_role: str) -> list[str]:
        """The ids of the callers of one role that have tasks stored for `swarm_name` (an
        operator's listing: the remote swarms whose instances left memory)."""
        rows = await self._fetch(
            "SELECT DISTINCT caller_id FROM tasks WHERE swarm_name = ? AND caller_role = ?",
            swarm_name,
            caller_role,
        )
        return [str(row[0]) for row in rows]

    async def running_callers(self, swarm_name: str, limit: int) -> list[InstanceKey]:
        """Up to `limit` instances of `swarm_name` that have a running task stored (state
        ``running``: not paused, not finished), the one with the oldest such task first (what
        a server resumes at start-up: `mail.server.instances`)."""
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
        """Keep each task's summary in its record (key `summary`), in one transaction; a task
        that is gone is skipped."""
        if not summaries:
            return
        sql = (
            f"UPDATE tasks SET metadata = {self._spell.with_summary} WHERE {_KEY} AND task_id = ?4"
        )
        rows = [(*key_args(key), t, self.store._json(s)) for t, s in summaries.items()]

        async def save(c: SqlConn) -> None:
            async with c.transaction():
                await c.executemany(sql, rows)

        await self._settle()
        await self.sql.run(save)

    async def task_bytes(self, key: InstanceKey, task_ids: Sequence[str]) -> dict[str, int]:
        """task_id -> bytes its rows hold (the encoded content, without database overhead)."""
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
                    f"SELECT subject, sum({self._spell.key_bytes}) FROM {KEYS_TABLE}"
                    f" WHERE {_KEY} AND subject = ANY(?4) GROUP BY subject"
                )
                for subject, n in await c.fetch(sql, *key_args(key), list(task_ids)):
                    sizes[subject] += int(n or 0)
            return sizes

        await self._settle()
        return await self.sql.run(measure)

    async def _prune_batch(self, cutoff: _dt.datetime) -> PruneReport:
        """Remove up to one batch of tasks finished before `cutoff`, in one transaction."""
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
                cutoff_arg = self.store._start_time(normalize_start_time(cutoff))
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

    async def prune(self, cutoff: _dt.datetime, *, max_batches: int | None = None) -> PruneReport:
        """Remove every task finished (and not changed since) before `cutoff`, batch by batch."""
        await self._settle()
        report = PruneReport()
        while max_batches is None or report.batches < max_batches:
            batch = await self._prune_batch(cutoff)
            if not batch.tasks:
                break
            report.add(batch)
        return report

    async def reclaim_space(self, max_pages: int | None = None) -> int:
        """Give freed space back to the file system; returns the bytes returned (SQLite; step
        by step: the store's write batches run on the same thread in between)."""
        if self.postgres:
            return 0
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
        if self.postgres:
            return SpaceReport()
        await self._settle()
        return await self._db.run(space_report)  # type: ignore[no-any-return]
