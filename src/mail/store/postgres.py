"""PostgreSQL TaskStore (asyncpg), with writes batched off the hot path."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from mail.store import schema
from mail.store.base import TaskStore
from mail.store.postgres_schema import (
    close_pool,
    create_unless_forbidden,
    ensure_schema,
    missing_tables,
    normalize_dsn,
    open_pool,
    redact_dsn,
)
from mail.store.records import (
    InstanceKey,
    InstanceSnapshot,
    StoreUnavailableError,
    parse_start_time,
    to_json,
)
from mail.store.sql_batch import (
    SqlWrite,
    batch_statements,
    coalesce_writes,
    encode_deferred,
    key_args,
    leased_keys,
)
from mail.store.sql_reads import add_snapshot_row, snapshot_queries

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
    # A whole history (start 0) also deletes the history's later segments: one statement,
    # not a second executemany (a round trip more for a lone request).
    "history": """
        WITH trimmed AS (
            DELETE FROM agent_histories WHERE $7::integer = 0 AND swarm_name = $1
                AND caller_role = $2 AND caller_id = $3 AND task_id = $4 AND agent_name = $5
                AND start > 0
        )
        INSERT INTO agent_histories (swarm_name, caller_role, caller_id, task_id, agent_name,
                                     tool_format, start, history)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
        ON CONFLICT (swarm_name, caller_role, caller_id, task_id, agent_name, start)
        DO UPDATE SET
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
    "webhook_event": """
        INSERT INTO webhook_events (swarm_name, caller_role, caller_id, event_id, task_id,
                                    event_type, payload, created_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (event_id) DO NOTHING
    """,
}

_SNAPSHOT_SQL = snapshot_queries(
    "swarm_name = $1 AND caller_role = $2 AND caller_id = $3", "start_time, created_at"
)

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

# The same claim, unless another holder claimed the key less than $5 seconds ago (then no row).
_CLAIM_UNLESS_FRESH_SQL = (
    _CLAIM_SQL.replace("RETURNING generation", "")
    + """    WHERE g.holder = EXCLUDED.holder OR g.claimed_at < NOW() - make_interval(secs => $5)
    RETURNING generation
"""
)
# The same claim, if the key's holder is still `$5` (one found gone), and who holds a key.
_CLAIM_IF_HOLDER_SQL = _CLAIM_SQL.replace(
    "RETURNING generation", "WHERE g.holder = $5\n    RETURNING generation"
)
_HOLDER_SQL = """
    SELECT holder FROM instance_generations
    WHERE swarm_name = $1 AND caller_role = $2 AND caller_id = $3
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
        super().__init__(
            name="mail.store.postgres",
            is_transient=is_transient_error,
            max_batch=max_batch,
            batch_delay=batch_delay,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_pending=max_pending,
            close_timeout=close_timeout,
            read_timeout=read_timeout,
        )
        self._dsn = normalize_dsn(database_url)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._connect_timeout = connect_timeout
        self._application_name = application_name
        self._auto_create_schema = auto_create_schema
        self._pool: asyncpg.Pool | None = None
        self._schema_ready = False
        # One claim at a time: two at once (the start-up resume and a caller's first request)
        # could have their answers come back out of order and leave the older lease held.
        self._claiming = asyncio.Lock()

    # -- dialect ---------------------------------------------------------------------------
    def _json(self, value: Any) -> str:
        return _pg_json(value)

    def _text(self, value: Any) -> str | None:
        return None if value is None else _strip_nul(str(value))

    def _start_time(self, iso: str) -> Any:
        return parse_start_time(iso)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._pool is not None:
            return
        self._pool = await open_pool(
            self._dsn,
            self._prepare_schema,
            purpose="",
            min_size=self._min_size,
            max_size=self._max_size,
            command_timeout=self._command_timeout,
            timeout=self._connect_timeout,
            server_settings={"application_name": self._application_name},
        )
        self._buffer.start()
        logger.info("PostgreSQL task store ready (%s)", redact_dsn(self._dsn))

    async def _release(self) -> None:
        pool, self._pool = self._pool, None
        await close_pool(pool, self._close_timeout)

    async def _prepare_schema(self, conn: asyncpg.Connection) -> None:
        absent = await missing_tables(conn)
        if absent:
            if not self._auto_create_schema:
                raise StoreUnavailableError(
                    f"missing tables {', '.join(absent)}; run `mail db-init` first"
                )
            logger.info("creating missing tables: %s", ", ".join(absent))
        # Also brings a database initialised by the original up to date (columns, indexes).
        await create_unless_forbidden(conn, schema.TABLES, ensure_schema)
        self._schema_ready = True

    # -- fencing ---------------------------------------------------------------------------
    async def claim_generation(self, key: InstanceKey, holder: str = "") -> int:
        async with self._claiming:
            generation = await self._claim(key, _CLAIM_SQL, holder)
        assert generation is not None
        return generation

    async def claim_unless_fresh(
        self,
        key: InstanceKey,
        holder: str,
        fresh_seconds: float,
        gone: Callable[[str], bool] | None = None,
    ) -> int | None:
        """`claim_generation`, unless another holder claimed `key` less than `fresh_seconds`
        ago: then None and nothing changes (that holder is taken to be serving it), unless
        `gone(that holder)` says it is not (a process of this machine that died)."""
        async with self._claiming:
            generation = await self._claim(
                key, _CLAIM_UNLESS_FRESH_SQL, holder, float(fresh_seconds)
            )
            if generation is not None or gone is None:
                return generation
            previous = await self._fetch_claim(key, _HOLDER_SQL)
            if previous is None or not gone(str(previous)):
                return None
            return await self._claim(key, _CLAIM_IF_HOLDER_SQL, holder, str(previous))

    async def _claim(self, key: InstanceKey, sql: str, *args: Any) -> int | None:
        if key in self._fencing.leases:
            # Re-claiming: what this store wrote under its previous lease lands first
            # instead of being dropped as stale.
            await self.flush(self._read_timeout)
        generation = await self._fetch_claim(key, sql, *args)
        if generation is None:
            return None
        self._fencing.claimed(key, int(generation))
        logger.debug("claimed generation %d of %s (holder %r)", generation, key, args[0])
        return int(generation)

    async def _fetch_claim(self, key: InstanceKey, sql: str, *args: Any) -> Any:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        try:
            async with asyncio.timeout(self._read_timeout):
                async with self._pool.acquire() as conn:
                    return await conn.fetchval(sql, *key_args(key), *args)
        except Exception as exc:
            if isinstance(exc, asyncpg.exceptions.UndefinedTableError):
                self._schema_ready = False
            if is_transient_error(exc):
                raise StoreUnavailableError(
                    f"cannot claim a generation in PostgreSQL: {type(exc).__name__}: {exc}"
                ) from exc
            raise

    async def _lock_generations(
        self, conn: asyncpg.Connection, writes: list[SqlWrite]
    ) -> dict[tuple[Any, ...], int]:
        """Lock the generations of the batch's fenced keys and return them."""
        leased = leased_keys(writes)
        if not leased:
            return {}
        names, roles, ids = (list(column) for column in zip(*leased, strict=True))
        return {
            (row["swarm_name"], row["caller_role"], row["caller_id"]): row["generation"]
            for row in await conn.fetch(_LOCK_GENERATIONS_SQL, names, roles, ids)
        }

    async def _apply_batch(self, batch: Sequence[SqlWrite]) -> None:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        writes = encode_deferred(coalesce_writes(batch), self._json, self._forget_histories)
        committed = False
        try:
            async with self._pool.acquire() as conn:
                if not self._schema_ready and self._auto_create_schema:
                    await ensure_schema(conn)
                    self._schema_ready = True
                try:
                    async with conn.transaction():
                        current = await self._lock_generations(conn, writes)
                        statements, fenced = batch_statements(writes, current, _SQL)
                        for statement, rows in statements:
                            await conn.executemany(statement, rows)
                    committed = True
                except asyncpg.exceptions.UndefinedTableError:
                    self._schema_ready = False
                    raise
        except Exception:
            # The pool resets a connection it takes back and raises what that reset raised:
            # a link lost just after the COMMIT's answer. The batch is written; retried, its
            # events would be stored twice.
            if not committed:
                raise
            logger.warning("PostgreSQL link lost after a batch was committed", exc_info=True)
        self._count_fenced(fenced)

    # -- reads -----------------------------------------------------------------------------
    async def load_instance(self, key: InstanceKey) -> InstanceSnapshot:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        return await super().load_instance(key)

    async def _read_instance(self, key: InstanceKey) -> InstanceSnapshot:
        assert self._pool is not None
        args = key_args(key)
        snapshot = InstanceSnapshot()
        async with self._pool.acquire() as conn:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                for table, sql in _SNAPSHOT_SQL:
                    for row in await conn.fetch(sql, *args):
                        add_snapshot_row(snapshot, table, row, _isoformat)
        return snapshot

    @property
    def backend(self) -> str:
        return "postgres"


def _isoformat(value: Any) -> str:
    return str(value.isoformat())
