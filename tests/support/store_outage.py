"""An in-process swarm whose PostgreSQL task store reaches the database through a TCP proxy
the test stops (connection refused: the database is away) and starts again on the same port."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tests.support.tcp_proxy import TcpProxy, via_proxy

from mail import AgentToolCall
from mail.store.postgres import PostgresTaskStore


def tool_call(name: str, args: dict[str, Any]) -> AgentToolCall:
    """A tool call as the swarms' agent functions return it (no LLM behind them)."""
    return AgentToolCall(
        tool_name=name,
        tool_args=args,
        tool_call_id=f"c-{uuid.uuid4().hex[:8]}",
        completion={"role": "assistant", "content": None},
    )


@contextlib.asynccontextmanager
async def store_behind_proxy(
    database: str, swarm: Any, **store_options: Any
) -> AsyncIterator[tuple[PostgresTaskStore, TcpProxy]]:
    """The proxy up, a started `PostgresTaskStore` through it (``store_options``) attached to
    ``swarm``; on exit the swarm shuts down, then the store and the proxy go."""
    proxy = TcpProxy.to(database)
    await proxy.start()
    store = PostgresTaskStore(via_proxy(database, proxy.port), **store_options)
    await store.start()
    await swarm.attach_store(store)
    try:
        yield store, proxy
    finally:
        await swarm.shutdown()
        await store.close()
        await proxy.stop()
