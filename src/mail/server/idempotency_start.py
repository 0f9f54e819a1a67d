"""The server's `IdempotencyGuard`, made at start-up over the store the task store uses:
SQLite (its keys of ``POST /message`` committed with their task's writes), PostgreSQL, or
memory. The guard itself is ``mail.server.idempotency_guard``."""

from __future__ import annotations

from typing import Any

from mail.server.idempotency_guard import IdempotencyGuard
from mail.store.idempotency import IdempotencyStore


async def start_guard(config: Any, task_store: Any) -> IdempotencyGuard:
    """The server's guard over the task store's database (SQLite or PostgreSQL), or memory."""
    store = await _open_store(task_store)
    settings = config.settings
    return IdempotencyGuard(
        store,
        swarm_name=config.swarm.name,
        ttl=settings.idempotency_key_ttl,
        max_keys=settings.max_idempotency_keys_per_caller,
        max_length=settings.max_idempotency_key_length,
        takeover_after=settings.idempotency_takeover_after,
    )


async def _open_store(task_store: Any) -> IdempotencyStore:
    backend = getattr(task_store, "backend", "")
    if backend == "sqlite":
        from mail.store.idempotency_sqlite_buffered import BufferedSqliteIdempotencyStore

        # The same file (and writer thread); POST /message's keys go with its task's writes.
        lite = BufferedSqliteIdempotencyStore(task_store.path, task_store)
        await lite.start()
        return lite
    if backend == "postgres":
        from mail.store import database_url_from_env
        from mail.store.idempotency_postgres import PostgresIdempotencyStore

        url = database_url_from_env()
        if url:
            pg = PostgresIdempotencyStore(url)
            await pg.start()
            return pg
    from mail.store.idempotency import MemoryIdempotencyStore

    return MemoryIdempotencyStore()
