"""PostgreSQL TaskStore (asyncpg), with writes batched off the hot path.

Each write method validates and JSON-encodes its arguments (so a bad value fails in the
caller, before it is acknowledged), then hands a small `_Write` to a `WriteBehindBuffer`.
The buffer's worker applies batches in one transaction each and retries through outages;
see `mail.store.writer` for the guarantees.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from mail.store.base import (
    TASK_FIELDS,
    InstanceKey,
    InstanceSnapshot,
    StoreUnavailableError,
    TaskStore,
    detect_tool_format,
    normalize_event,
    parse_start_time,
    split_task_record,
    to_json,
)
from mail.store.postgres_schema import ensure_schema, missing_tables, normalize_dsn, redact_dsn
from mail.store.writer import WriteBehindBuffer

logger = logging.getLogger("mail.store.postgres")

_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # includes ConnectionRefusedError / ConnectionResetError
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,  # "connection is closed", pool being reset, ...
    asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, cannot connect now
    asyncpg.exceptions.InsufficientResourcesError,  # too many connections, disk full
    asyncpg.exceptions.TransactionRollbackError,  # serialization failure, deadlock
    asyncpg.exceptions.UndefinedTableError,  # tables dropped under us: recreated, retried
)


def is_transient_error(exc: BaseException) -> bool:
    """Errors worth retrying: the database or the path to it is (temporarily) unavailable."""
    return isinstance(exc, _TRANSIENT_ERRORS)


@dataclass(frozen=True, slots=True)
class _Write:
    kind: str  # "task" | "event" | "history" | "response" | "queue" | "queue_delete"
    args: tuple[Any, ...]  # starts with swarm_name, caller_role, caller_id
    generation: int | None = None  # the lease it was made under; None: not fenced

    def history_identity(self) -> tuple[Any, ...] | None:
        # (swarm, role, id, task, agent): later saves of the same history supersede.
        return self.args[:5] if self.kind == "history" else None


_SQL: dict[str, str] = {
    "task": """
        INSERT INTO tasks (swarm_name, caller_role, caller_id, task_id, task_owner,
                           task_contributors, remote_swarms, is_running, completed, title,
                           start_time, metadata)
        VALUES ($1, $2, $3, $4, COALESCE($5, ''), COALESCE($6::jsonb, '[]'::jsonb),
                COALESCE($7::jsonb, '[]'::jsonb), COALESCE($8, FALSE), COALESCE($9, FALSE),
                $10, COALESCE($11::timestamptz, NOW()), $12::jsonb)
        ON CONFLICT (task_id, swarm_name, caller_role, caller_id) DO UPDATE SET
            task_owner = COALESCE($5, tasks.task_owner),
            task_contributors = COALESCE($6::jsonb, tasks.task_contributors),
            remote_swarms = COALESCE($7::jsonb, tasks.remote_swarms),
            is_running = COALESCE($8, tasks.is_running),
            completed = COALESCE($9, tasks.completed),
            title = COALESCE($10, tasks.title),
            start_time = COALESCE($11::timestamptz, tasks.start_time),
            metadata = COALESCE(tasks.metadata, '{}'::jsonb) || $12::jsonb,
            updated_at = NOW()
    """,
    "event": """
        INSERT INTO task_events (swarm_name, caller_role, caller_id, task_id,
                                 event_type, event_data, event_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
    """,
    "history": """
        INSERT INTO agent_histories (swarm_name, caller_role, caller_id, task_id, agent_name,
                                     tool_format, history)
        VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)
        ON CONFLICT (swarm_name, caller_role, caller_id, task_id, agent_name) DO UPDATE SET
            tool_format = EXCLUDED.tool_format,
            history = EXCLUDED.history,
            updated_at = NOW()
    """,
    "response": """
        INSERT INTO task_responses (swarm_name, caller_role, caller_id, task_id, response)
        VALUES ($1, $2, $3, $4, $5::jsonb)
        ON CONFLICT (task_id, swarm_name, caller_role, caller_id) DO UPDATE SET
            response = EXCLUDED.response
    """,
    "queue": """
        INSERT INTO task_queues (swarm_name, caller_role, caller_id, task_id, items)
        VALUES ($1, $2, $3, $4, $5::jsonb)
        ON CONFLICT (task_id, swarm_name, caller_role, caller_id) DO UPDATE SET
            items = EXCLUDED.items,
            updated_at = NOW()
    """,
    "queue_delete": """
        DELETE FROM task_queues
        WHERE swarm_name = $1 AND caller_role = $2 AND caller_id = $3 AND task_id = $4
    """,
}

_INSTANCE = "swarm_name = $1 AND caller_role = $2 AND caller_id = $3"

# A claim is one statement: its row lock (taken by the INSERT or the UPDATE) waits for every
# writer transaction holding the row FOR SHARE, and writers that come later see the new value.
_CLAIM_SQL = """
    INSERT INTO instance_generations AS g (swarm_name, caller_role, caller_id, generation,
                                           claimed_at, holder)
    VALUES ($1, $2, $3, 1, NOW(), $4)
    ON CONFLICT (swarm_name, caller_role, caller_id) DO UPDATE SET
        generation = g.generation + 1,
        claimed_at = NOW(),
        holder = EXCLUDED.holder
    RETURNING generation
"""

# Taken at the start of a batch's transaction for the fenced keys in it. FOR SHARE keeps a
# claim from committing until the batch is committed; a claim already holding the row
# makes this wait, and (READ COMMITTED) it then returns the claim's new generation.
_LOCK_GENERATIONS_SQL = """
    SELECT swarm_name, caller_role, caller_id, generation FROM instance_generations
    WHERE (swarm_name, caller_role, caller_id) IN (
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
    FOR SHARE
"""


def _strip_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_strip_nul(v) for v in value]
    if isinstance(value, dict):
        return {_strip_nul(k): _strip_nul(v) for k, v in value.items()}
    return value


def _pg_json(value: Any) -> str:
    """JSON text PostgreSQL accepts: jsonb cannot hold NUL characters, so they become U+FFFD
    (an LLM emitting one must not cost the whole history)."""
    text = to_json(value)
    if "\\u0000" in text:
        text = to_json(_strip_nul(json.loads(text)))
    return text


def _pg_text(value: Any) -> str | None:
    return None if value is None else _strip_nul(str(value))


def _key_args(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)


def _coalesce_histories(batch: Sequence[_Write]) -> list[_Write]:
    """Drop history saves that a later save of the same history in this batch replaces."""
    last_index: dict[tuple[Any, ...], int] = {}
    for index, write in enumerate(batch):
        identity = write.history_identity()
        if identity is not None:
            last_index[identity] = index
    return [
        write
        for index, write in enumerate(batch)
        if (identity := write.history_identity()) is None or last_index[identity] == index
    ]


class PostgresTaskStore(TaskStore):
    def __init__(
        self,
        database_url: str,
        *,
        min_size: int = 5,
        max_size: int = 20,
        command_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        application_name: str = "mail-server",
        auto_create_schema: bool = True,
        max_batch: int = 200,
        batch_delay: float = 0.05,
        retry_initial: float = 0.2,
        retry_max: float = 5.0,
        max_pending: int = 100_000,
        close_timeout: float = 10.0,
        read_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self._dsn = normalize_dsn(database_url)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._connect_timeout = connect_timeout
        self._application_name = application_name
        self._auto_create_schema = auto_create_schema
        self._close_timeout = close_timeout
        self._read_timeout = read_timeout
        self._pool: asyncpg.Pool | None = None
        self._schema_ready = False
        self._buffer: WriteBehindBuffer[_Write] = WriteBehindBuffer(
            self._apply_batch,
            is_transient=is_transient_error,
            max_batch=max_batch,
            max_delay=batch_delay,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_pending=max_pending,
            name="mail.store.postgres",
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                command_timeout=self._command_timeout,
                timeout=self._connect_timeout,
                server_settings={"application_name": self._application_name},
            )
            async with self._pool.acquire() as conn:
                await self._prepare_schema(conn)
        except Exception as exc:
            if self._pool is not None:
                self._pool.terminate()
                self._pool = None
            raise StoreUnavailableError(
                f"cannot use PostgreSQL at {redact_dsn(self._dsn)}: {type(exc).__name__}: {exc}"
            ) from exc
        self._buffer.start()
        logger.info("PostgreSQL task store ready (%s)", redact_dsn(self._dsn))

    async def close(self) -> None:
        lost = await self._buffer.close(self._close_timeout)
        if lost:
            logger.error("closing the PostgreSQL store with %d unwritten write(s)", lost)
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                async with asyncio.timeout(self._close_timeout):
                    await pool.close()
            except (TimeoutError, OSError, asyncpg.InterfaceError):
                pool.terminate()

    async def flush(self, timeout: float | None = None) -> bool:
        if self._buffer.pending and not self._buffer.running:
            return False
        return await self._buffer.flush(timeout)

    async def _prepare_schema(self, conn: asyncpg.Connection) -> None:
        absent = await missing_tables(conn)
        if absent:
            if not self._auto_create_schema:
                raise StoreUnavailableError(
                    f"missing tables {', '.join(absent)}; run `mail db-init` first"
                )
            logger.info("creating missing tables: %s", ", ".join(absent))
        # Also brings a database initialised by the original up to date (columns, indexes).
        await ensure_schema(conn)
        self._schema_ready = True

    # -- writes ----------------------------------------------------------------------------
    async def upsert_task(self, key: InstanceKey, record: Mapping[str, Any]) -> None:
        columns, extra = split_task_record(record)
        start_time = columns.get("start_time")
        contributors = columns.get("task_contributors")
        remote = columns.get("remote_swarms")
        args = (
            *_key_args(key),
            columns["task_id"],
            _pg_text(columns.get("task_owner")),
            None if contributors is None else _pg_json(contributors),
            None if remote is None else _pg_json(remote),
            columns.get("is_running"),
            columns.get("completed"),
            _pg_text(columns.get("title")),
            None if start_time is None else parse_start_time(start_time),
            _pg_json(extra),
        )
        await self._submit(key, "task", args)

    async def append_event(self, key: InstanceKey, task_id: str, event: Any) -> None:
        ev = normalize_event(event)
        args = (
            *_key_args(key),
            task_id,
            _pg_text(ev["event"]),
            _pg_text(ev["data"]),
            _pg_text(ev["id"]),
        )
        await self._submit(key, "event", args)

    async def save_history(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> None:
        # Encoding now also snapshots the history: the runtime keeps mutating its list.
        encoded = _pg_json(list(history))
        fmt = tool_format or detect_tool_format(history)
        args = (*_key_args(key), task_id, agent_name, fmt, encoded)
        await self._submit(key, "history", args)

    async def save_response(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> None:
        args = (*_key_args(key), task_id, _pg_json(dict(response)))
        await self._submit(key, "response", args)

    async def save_queue(self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]) -> None:
        args = (*_key_args(key), task_id, _pg_json(list(items)))
        await self._submit(key, "queue", args)

    async def delete_queue(self, key: InstanceKey, task_id: str) -> None:
        await self._submit(key, "queue_delete", (*_key_args(key), task_id))

    async def _submit(self, key: InstanceKey, kind: str, args: tuple[Any, ...]) -> None:
        generation = self._fencing.generation_for(key)
        if generation is not None and self._fencing.drop_if_known_fenced(key, generation):
            return
        await self._buffer.submit(_Write(kind, args, generation))

    # -- fencing ---------------------------------------------------------------------------
    async def claim_generation(self, key: InstanceKey, holder: str = "") -> int:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        if key in self._fencing.leases:
            # Re-claiming: what this store wrote under its previous lease lands first
            # instead of being dropped as stale.
            await self.flush(self._read_timeout)
        try:
            async with asyncio.timeout(self._read_timeout):
                async with self._pool.acquire() as conn:
                    generation = await conn.fetchval(_CLAIM_SQL, *_key_args(key), holder)
        except Exception as exc:
            if isinstance(exc, asyncpg.exceptions.UndefinedTableError):
                self._schema_ready = False
            if is_transient_error(exc):
                raise StoreUnavailableError(
                    f"cannot claim a generation in PostgreSQL: {type(exc).__name__}: {exc}"
                ) from exc
            raise
        self._fencing.claimed(key, int(generation))
        logger.debug("claimed generation %d of %s (holder %r)", generation, key, holder)
        return int(generation)

    async def _fence(
        self, conn: asyncpg.Connection, writes: list[_Write]
    ) -> tuple[list[_Write], list[tuple[InstanceKey, int, int, int | None]]]:
        """Lock the generations of the batch's fenced keys; keep only current writes.

        Returns the writes to apply and (key, generation, dropped count, current
        generation) for each lease that was found superseded.
        """
        leased = {w.args[:3] for w in writes if w.generation is not None}
        if not leased:
            return writes, []
        names, roles, ids = (list(column) for column in zip(*sorted(leased), strict=True))
        current = {
            (row["swarm_name"], row["caller_role"], row["caller_id"]): row["generation"]
            for row in await conn.fetch(_LOCK_GENERATIONS_SQL, names, roles, ids)
        }
        kept: list[_Write] = []
        dropped: dict[tuple[Any, ...], int] = {}
        for write in writes:
            if write.generation is None or current.get(write.args[:3]) == write.generation:
                kept.append(write)
            else:
                lease = (*write.args[:3], write.generation)
                dropped[lease] = dropped.get(lease, 0) + 1
        return kept, [
            (InstanceKey(*lease[:3]), lease[3], count, current.get(lease[:3]))
            for lease, count in dropped.items()
        ]

    async def _apply_batch(self, batch: Sequence[_Write]) -> None:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        writes = _coalesce_histories(batch)
        fenced: list[tuple[InstanceKey, int, int, int | None]] = []
        async with self._pool.acquire() as conn:
            if not self._schema_ready and self._auto_create_schema:
                await ensure_schema(conn)
                self._schema_ready = True
            try:
                async with conn.transaction():
                    writes, fenced = await self._fence(conn, writes)
                    # Consecutive writes of one kind go in one executemany; kinds are never
                    # reordered, so per-task ordering is kept.
                    start = 0
                    while start < len(writes):
                        end = start
                        kind = writes[start].kind
                        while end < len(writes) and writes[end].kind == kind:
                            end += 1
                        await conn.executemany(_SQL[kind], [w.args for w in writes[start:end]])
                        start = end
            except asyncpg.exceptions.UndefinedTableError:
                self._schema_ready = False
                raise
        # Counted only once the transaction committed (a failed batch is retried whole).
        for key, generation, count, now_current in fenced:
            self._fencing.dropped(key, generation, count, now_current)

    # -- reads -----------------------------------------------------------------------------
    async def load_instance(self, key: InstanceKey) -> InstanceSnapshot:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        # Read-your-writes: what was acknowledged for this instance must be visible.
        if not await self.flush(self._read_timeout):
            raise StoreUnavailableError(
                f"pending writes could not be stored within {self._read_timeout:.0f}s "
                f"(last error: {self._buffer.last_error})"
            )
        try:
            async with asyncio.timeout(self._read_timeout):
                return await self._read_instance(key)
        except Exception as exc:
            if is_transient_error(exc):
                raise StoreUnavailableError(
                    f"cannot read from PostgreSQL: {type(exc).__name__}: {exc}"
                ) from exc
            raise

    async def _read_instance(self, key: InstanceKey) -> InstanceSnapshot:
        assert self._pool is not None
        args = _key_args(key)
        snapshot = InstanceSnapshot()
        async with self._pool.acquire() as conn:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                for row in await conn.fetch(
                    f"SELECT task_id, task_owner, task_contributors, remote_swarms, is_running,"
                    f" completed, title, start_time, metadata FROM tasks WHERE {_INSTANCE}"
                    " ORDER BY start_time, created_at",
                    *args,
                ):
                    snapshot.tasks[row["task_id"]] = _task_from_row(row)
                for row in await conn.fetch(
                    "SELECT task_id, event_type, event_data, event_id FROM task_events"
                    f" WHERE {_INSTANCE} ORDER BY seq",
                    *args,
                ):
                    snapshot.events.setdefault(row["task_id"], []).append(
                        {
                            "event": row["event_type"],
                            "data": row["event_data"],
                            "id": row["event_id"],
                        }
                    )
                for row in await conn.fetch(
                    f"SELECT task_id, agent_name, history FROM agent_histories WHERE {_INSTANCE}",
                    *args,
                ):
                    snapshot.histories[(row["task_id"], row["agent_name"])] = json.loads(
                        row["history"]
                    )
                for row in await conn.fetch(
                    f"SELECT task_id, response FROM task_responses WHERE {_INSTANCE}", *args
                ):
                    snapshot.responses[row["task_id"]] = json.loads(row["response"])
                for row in await conn.fetch(
                    f"SELECT task_id, items FROM task_queues WHERE {_INSTANCE}", *args
                ):
                    snapshot.queues[row["task_id"]] = json.loads(row["items"])
        return snapshot

    # -- health ----------------------------------------------------------------------------
    @property
    def pending_writes(self) -> int:
        return self._buffer.pending

    @property
    def failed_attempts(self) -> int:
        return self._buffer.failed_attempts

    @property
    def last_error(self) -> str | None:
        return self._buffer.last_error

    @property
    def dropped_writes(self) -> int:
        return self._buffer.dropped

    @property
    def backend(self) -> str:
        return "postgres"

    def is_degraded(self) -> bool:
        return self._buffer.outage_since is not None

    def status(self) -> dict[str, Any]:
        status = super().status()
        status["dropped_writes"] = self._buffer.dropped
        return status


def _task_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    metadata = row["metadata"]
    if metadata:
        record.update(json.loads(metadata))
    for name in TASK_FIELDS:
        value = row[name]
        if name in ("task_contributors", "remote_swarms"):
            value = json.loads(value) if value is not None else []
        elif name == "start_time" and value is not None:
            value = value.isoformat()
        record[name] = value
    return record
