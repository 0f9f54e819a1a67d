"""The server's SQLite key store opened on a task store of its own file, as `mail server`
opens them (`idempotency_sqlite_buffered`), for store-level tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

from mail.store.idempotency_sqlite_buffered import BufferedSqliteIdempotencyStore
from mail.store.sqlite import SqliteTaskStore

S = TypeVar("S", bound=BufferedSqliteIdempotencyStore)


@contextlib.asynccontextmanager
async def buffered_key_store(
    where: Path, make: Callable[[Path, SqliteTaskStore], S]
) -> AsyncIterator[S]:
    tasks = SqliteTaskStore(where)
    await tasks.start()
    opened = make(where, tasks)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()
        await tasks.close()
