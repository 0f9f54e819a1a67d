"""`get_langmem_store()`: the LangGraph/LangMem store used for agent memory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

_FROM_ENV: Any = object()


@asynccontextmanager
async def get_langmem_store(
    database_url: str | None = _FROM_ENV, *, fallback: bool = True
) -> AsyncIterator[Any]:
    """Yield a LangGraph `BaseStore`: Postgres-backed when configured, in-memory otherwise.

    `database_url` defaults to DATABASE_URL; pass None to force the in-memory store.
    With `fallback=False` a database that cannot be reached raises instead of degrading.
    """
    from mail.store import database_url_from_env
    from mail.store.agent_memory import open_langgraph_store

    url = database_url_from_env() if database_url is _FROM_ENV else database_url
    store, close = await open_langgraph_store(url, fallback=fallback)
    try:
        yield store
    finally:
        if close is not None:
            await close()
