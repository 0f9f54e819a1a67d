"""SQLite TaskStore: the default of `mail server`, durable without a database server."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mail.store.base import TaskStore
from mail.store.records import (
    InstanceKey,
    InstanceSnapshot,
    StoreUnavailableError,
    normalize_start_time,
    to_json,
)
from mail.store.schema import NOW_SQL
from mail.store.sql_batch import (
    EVENT_ROWS_KIND,
    HISTORY_TRIM_KIND,
    FencedLease,
    SqlWrite,
    batch_statements,
    coalesce_writes,
    encode_deferred_sized,
    key_args,
    leased_keys,
)
from mail.store.sql_reads import add_snapshot_row, snapshot_queries
from mail.store.sqlite_schema import (
    INLINE_BATCH_BYTES,
    MEMORY,
    is_transient_error,
    open_database,
    transaction,
)

logger = logging.getLogger("mail.store.sqlite")

_SQL: dict[str, str] = {
    "task": """
        INSERT INTO tasks (swarm_name, caller_role, caller_id, task_id, task_owner,
                           task_contributors, remote_swarms, is_running, completed, title,
                           start_time, metadata, created_at, updated_at)
        VALUES (?1, ?2, ?3, ?4, COALESCE(?5, ''), COALESCE(?6, '[]'), COALESCE(?7, '[]'),
                COALESCE(?8, 0), COALESCE(?9, 0), ?10, COALESCE(?11, {now}), ?12,
                {now}, {now})
        ON CONFLICT (task_id, swarm_name, caller_role, caller_id) DO UPDATE SET
            task_owner = COALESCE(?5, task_owner),
            task_contributors = COALESCE(?6, task_contributors),
            remote_swarms = COALESCE(?7, remote_swarms),
            is_running = COALESCE(?8, is_running),
            completed = COALESCE(?9, completed),
            title = COALESCE(?10, title),
            start_time = COALESCE(?11, start_time),
            metadata = mail_merge(metadata, ?12),
            updated_at = {now}
    """,
    "event": """
        INSERT INTO task_events (swarm_name, caller_role, caller_id, task_id,
                                 event_type, event_data, event_id, created_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, {now})
    """,
    "history": """
        INSERT INTO agent_histories (swarm_name, caller_role, caller_id, task_id, agent_name,
                                     tool_format, start, history, created_at, updated_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, {now}, {now})
        ON CONFLICT (swarm_name, caller_role, caller_id, task_id, agent_name, start)
        DO UPDATE SET
            tool_format = excluded.tool_format,
            history = excluded.history,
            updated_at = excluded.updated_at
    """,
    HISTORY_TRIM_KIND: """
        DELETE FROM agent_histories WHERE swarm_name = ? AND caller_role = ? AND caller_id = ?
            AND task_id = ? AND agent_name = ? AND start > 0
    """,
    "response": """
        INSERT INTO task_responses (swarm_name, caller_role, caller_id, task_id, response,
                                    created_at)
        VALUES (?, ?, ?, ?, ?, {now})
        ON CONFLICT (task_id, swarm_name, caller_role, caller_id) DO UPDATE SET
            response = excluded.response
    """,
    "queue": """
        INSERT INTO task_queues (swarm_name, caller_role, caller_id, task_id, items,
                                 created_at, updated_at)
        VALUES (?, ?, ?, ?, ?, {now}, {now})
        ON CONFLICT (task_id, swarm_name, caller_role, caller_id) DO UPDATE SET
            items = excluded.items,
            updated_at = excluded.updated_at
    """,
    "queue_delete": """
        DELETE FROM task_queues
        WHERE swarm_name = ? AND caller_role = ? AND caller_id = ? AND task_id = ?
    """,
    # The transactional outbox: a webhook event's row, written with the task event that
    # causes it (sql_batch). A batch retried after a failure writes it again: ignored.
    "webhook_event": """
        INSERT INTO webhook_events (swarm_name, caller_role, caller_id, event_id, task_id,
                                    event_type, payload, created_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (event_id) DO NOTHING
    """,
}

_SQL = {kind: sql.replace("{now}", NOW_SQL) for kind, sql in _SQL.items()}

_INSTANCE = "swarm_name = ? AND caller_role = ? AND caller_id = ?"
_SNAPSHOT_SQL = snapshot_queries(_INSTANCE, "start_time, rowid")

_CLAIM_SQL = """
    INSERT INTO instance_generations (swarm_name, caller_role, caller_id, generation,
                                      claimed_at, holder)
    VALUES (?1, ?2, ?3, 1, {now}, ?4)
    ON CONFLICT (swarm_name, caller_role, caller_id) DO UPDATE SET
        generation = generation + 1, claimed_at = {now}, holder = excluded.holder
    RETURNING generation
""".replace("{now}", NOW_SQL)


def _apply(conn: sqlite3.Connection, writes: list[SqlWrite]) -> list[FencedLease]:
    """One batch in one write transaction; the generation check sees every claim."""
    with transaction(conn):
        current: dict[tuple[Any, ...], int] = {}
        for lease in leased_keys(writes):
            row = conn.execute(
                f"SELECT generation FROM instance_generations WHERE {_INSTANCE}", lease
            ).fetchone()
            if row is not None:
                current[lease] = row[0]
        statements, fenced = batch_statements(writes, current, _SQL)
        for statement, rows in statements:
            conn.executemany(statement, rows)
    return fenced


def _claim(conn: sqlite3.Connection, args: tuple[str, ...]) -> int:
    with transaction(conn):
        return int(conn.execute(_CLAIM_SQL, args).fetchone()[0])


def _read(conn: sqlite3.Connection, args: tuple[str, str, str]) -> InstanceSnapshot:
    snapshot = InstanceSnapshot()
    conn.execute("BEGIN")  # one consistent read
    try:
        for table, sql in _SNAPSHOT_SQL:
            for row in conn.execute(sql, args):
                add_snapshot_row(snapshot, table, row, normalize_start_time)
    finally:
        conn.execute("COMMIT")
    return snapshot


# Larger batches than PostgreSQL (a commit is cheap here: no round trip), the same wait: what
# must not wait (an answer, a stream's event, a model call) is flushed at once anyway.
SQLITE_BUFFER_DEFAULTS: dict[str, Any] = {
    "max_batch": 500,
    "batch_delay": 0.05,
    "retry_initial": 0.2,
    "retry_max": 5.0,
    "max_pending": 100_000,
    "close_timeout": 10.0,
    "read_timeout": 30.0,
}


class SqliteTaskStore(TaskStore):
    """Tasks, events, histories, responses and queues in one SQLite file (WAL)."""

    def __init__(self, path: str | Path, **options: Any) -> None:
        """`options`: the write-behind settings of `TaskStore` (max_batch,
        batch_delay, retry_initial, retry_max, max_pending, close_timeout, read_timeout)."""
        settings = {**SQLITE_BUFFER_DEFAULTS, **options}
        super().__init__(name="mail.store.sqlite", is_transient=is_transient_error, **settings)
        self.path = Path(path)
        self.db = open_database(path)
        self._started = False

    # -- dialect ---------------------------------------------------------------------------
    def _json(self, value: Any) -> str:
        return to_json(value)

    def _text(self, value: Any) -> str | None:
        return None if value is None else str(value)

    TEXT_AS_IS = True

    def _start_time(self, iso: str) -> Any:
        return iso  # already normalised to UTC by split_task_record

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        await self.db.acquire_for_store()
        self._started = True
        self._buffer.start()
        logger.info("SQLite task store ready (%s)", self.db.path)

    async def _release(self) -> None:
        if self._started:
            self._started = False
            await self.db.release()

    # -- writes and fencing ------------------------------------------------------------------
    async def _apply_batch(self, batch: Sequence[SqlWrite]) -> None:
        writes, size, pages = self._encoded(batch)
        if size <= INLINE_BATCH_BYTES:  # on this thread (see INLINE_BATCH_BYTES)
            fenced = await self.db.run_small(_apply, writes, pages=pages)
        else:
            fenced = await self.db.run(_apply, writes, pages=pages)
        self._count_fenced(fenced)

    # A flushed batch is committed by the flushing caller, as `_apply_batch` would commit
    # it on this thread, without the task switches to the buffer's worker and back.
    WRITES_AT_FLUSH = True

    def _write_batch_now(self, batch: list[SqlWrite]) -> bool:
        """A small batch committed at once when the database's thread is idle (see
        `SqliteDatabase.run_inline`); False otherwise (the worker writes it)."""
        if not self._started:
            return False
        writes, size, pages = self._encoded(batch)
        if size > INLINE_BATCH_BYTES:
            return False
        done, fenced = self.db.run_inline(lambda conn: _apply(conn, writes), pages=pages)
        if done:
            self._count_fenced(fenced or [])
        return done

    def _encoded(self, batch: Sequence[SqlWrite]) -> tuple[list[SqlWrite], int, int]:
        """The batch as one transaction writes it, its bytes, and the pages it adds to
        the WAL (an estimate, see below)."""
        writes, size = encode_deferred_sized(
            coalesce_writes(batch), self._json, self._forget_histories
        )
        # Pages toward the next checkpoint: the text's own pages (an undercount of large
        # batches let the WAL grow to its 64 MiB cap and fill small disks), the pages every
        # transaction touches, 2 per task record (an update finds its row apart from other
        # tasks' rows, in the table and its index: 500 updates of scattered tasks wrote ~3x
        # what one page per two rows counted) and one per two other rows (events, histories
        # and the like share leaves; counting 2 pages each checkpointed three times as often
        # as CHECKPOINT_PAGES means). bench/results-store.md has the frames checkpoints find.
        records = 0
        rows = len(writes)
        for write in writes:
            kind = write.kind
            if kind == "task":
                records += 1
            elif kind == EVENT_ROWS_KIND:  # a task's events, one row each
                rows += len(write.args[-1]) - 1
        pages = 4 + records * 2 + (rows - records) // 2 + size // 4096
        return writes, size, pages

    async def claim_generation(self, key: InstanceKey, holder: str = "") -> int:
        if not self._started:
            raise StoreUnavailableError("the SQLite store is not started")
        if key in self._fencing.leases:
            await self.flush(self._read_timeout)
        try:
            generation = await self.db.run(_claim, (*key_args(key), holder))
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot claim a generation in SQLite: {exc}") from exc
        self._fencing.claimed(key, generation)
        return generation

    # -- reads -----------------------------------------------------------------------------
    async def load_instance(self, key: InstanceKey) -> InstanceSnapshot:
        if not self._started:
            raise StoreUnavailableError("the SQLite store is not started")
        return await super().load_instance(key)

    async def _read_instance(self, key: InstanceKey) -> InstanceSnapshot:
        return await self.db.run(_read, key_args(key))

    @property
    def backend(self) -> str:
        return "sqlite"


class MemoryTaskStore(SqliteTaskStore):
    """The SQLite store on a private in-memory database (`MEMORY`): what `create_store` gives
    when no database is configured (tests, and code that embeds one). Start it before use;
    its data lives as long as the store objects using it (closed and started again, it is
    still there).

    `share_with` makes this store use another one's database, the way two processes share a
    file: each store object keeps its own claimed generations, so fencing between them
    behaves as between two servers.
    """

    def __init__(self, *, share_with: MemoryTaskStore | None = None, **options: Any) -> None:
        super().__init__(MEMORY, **{"batch_delay": 0.0, **options})  # no file: no batching
        if share_with is not None:
            self.db = share_with.db

    # Writes to a store never started would wait for a writer that never runs: refused.
    async def _submit(self, write: SqlWrite | None) -> None:
        if not self._started:
            raise StoreUnavailableError("the memory store is not started (await its start())")
        await super()._submit(write)

    def write_nowait(self, key: InstanceKey, method: str, *args: Any) -> bool:
        return self._started and super().write_nowait(key, method, *args)

    def live_write_nowait(self, *args: Any, **kwargs: Any) -> Any:
        return super().live_write_nowait(*args, **kwargs) if self._started else None

    @property
    def backend(self) -> str:
        return "memory"
