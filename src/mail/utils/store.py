"""`get_langmem_store()`: the LangGraph/LangMem store used for agent memory.

    from mail.utils.store import get_langmem_store

    async with get_langmem_store() as store:          # a langgraph BaseStore
        await store.aput(("supervisor_memory",), "k1", {"content": "..."})
        hits = await store.asearch(("supervisor_memory",), query="roadmap")

With DATABASE_URL set (read after loading ./.env) the store keeps its data in PostgreSQL
(table `agent_memories`); otherwise, or if the database cannot be reached, it is an
in-process `InMemoryStore`. Leaving the context closes the database connections.
Search is lexical: no embedding model is configured, so nothing leaves the machine.
"""

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
