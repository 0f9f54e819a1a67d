"""Background tasks: the event loop keeps only weak references to the tasks it runs."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any


def hold(tasks: set[Any], task: asyncio.Task[Any]) -> None:
    """Keep `task` in `tasks` until it ends, so that it is not garbage-collected mid-run."""
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def finish(tasks: Collection[asyncio.Task[Any]], timeout: float) -> None:
    """Give `tasks` up to `timeout` seconds to end, then cancel the others and wait for them."""
    if not tasks:
        return
    _, pending = await asyncio.wait(set(tasks), timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
