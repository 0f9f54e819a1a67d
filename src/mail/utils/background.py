"""Background tasks: the event loop keeps only weak references to the tasks it runs."""

from __future__ import annotations

import asyncio
from typing import Any


def hold(tasks: set[Any], task: asyncio.Task[Any]) -> None:
    """Keep `task` in `tasks` until it ends, so that it is not garbage-collected mid-run."""
    tasks.add(task)
    task.add_done_callback(tasks.discard)
