"""Agent memory opened on first use, so servers whose agents never remember pay nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("mail.store.agent_memory_lazy")


class AgentMemoryClosed(RuntimeError):
    """The server is shutting down; its agent memory is closed."""


class LazyAgentMemory:
    """An ``AgentMemory`` (put/search/close) that opens its backing memory on first use.

    Opening is single-flight: concurrent first calls share one backing memory.
    """

    def __init__(self, open_memory: Callable[[], Awaitable[Any]]) -> None:
        self._open_memory = open_memory
        self._memory: Any | None = None
        self._opening: asyncio.Future[Any] | None = None
        self._closed = False

    @property
    def opened(self) -> bool:
        return self._memory is not None

    @property
    def store(self) -> Any | None:
        """The backing LangGraph store once opened (None before first use)."""
        return getattr(self._memory, "store", None)

    async def backend(self) -> Any:
        """The backing memory, opened now if this is its first use."""
        if self._memory is not None:
            return self._memory
        if self._closed:
            raise AgentMemoryClosed("agent memory is closed")
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        return await asyncio.shield(self._opening)

    async def _open(self) -> Any:
        try:
            memory = await self._open_memory()
        except BaseException:
            self._opening = None  # the next use tries again
            raise
        if self._closed:  # closed while opening: release what was opened
            await memory.close()
            raise AgentMemoryClosed("agent memory is closed")
        self._memory = memory
        logger.debug("agent memory opened on first use")
        return memory

    def status(self) -> dict[str, Any]:
        """The backing memory's write health once opened (never degraded before)."""
        status = getattr(self._memory, "status", None)
        if status is None:
            return {"degraded": False, "last_error": None, "pending_writes": 0}
        result: dict[str, Any] = status()
        return result

    async def put(self, agent_name: str, key: str, value: dict[str, Any]) -> None:
        await (await self.backend()).put(agent_name, key, value)

    async def search(self, agent_name: str, query: str, limit: int = 5) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await (await self.backend()).search(agent_name, query, limit)
        return result

    async def close(self) -> None:
        self._closed = True
        opening = self._opening
        if self._memory is None and opening is not None and not opening.done():
            # Let the open finish (it sees the flag and closes what it opened).
            with contextlib.suppress(Exception):
                await asyncio.shield(opening)
        memory, self._memory = self._memory, None
        if memory is not None:
            await memory.close()
