"""A task's record as a live write (`mail.store.sql_batch.LiveWrite`), on SQLite and
PostgreSQL: the observer queues one write per task per batch and the record is built and
encoded once, when the batch is cut, as it is then; a change after the cut queues a new one;
with the buffer full the record goes the slow way, in order, and lands as it was last.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.sql_batches import small_sql_store, small_store, small_store_pg_url  # noqa: F401 - fixtures
from tests.test_store_postgres import new_key

from mail.api.persistence import StoreObserver
from mail.core.tasks import MAILTask
from mail.store import TaskStore


class Runtime:
    """What `StoreObserver.task_changed` reads of its runtime."""

    def __init__(self) -> None:
        self.last_breakpoint_caller: dict[str, str] = {}
        self.last_breakpoint_tool_calls: dict[str, Any] = {}


@pytest.fixture
def store(small_sql_store: TaskStore) -> TaskStore:  # noqa: F811
    return small_sql_store


def _count_builds(store: TaskStore) -> list[int]:
    """How many task records the store built (checked and encoded) from now on."""
    builds = [0]
    build = store._builders["upsert_task"]

    def counted(*args: Any) -> Any:
        builds[0] += 1
        return build(*args)

    store._builders["upsert_task"] = counted
    return builds


async def test_changes_before_a_batch_are_one_record_built_at_the_cut(
    store: TaskStore,
) -> None:
    key = new_key()
    runtime = Runtime()
    observer = StoreObserver(runtime, store, key)  # type: ignore[arg-type]
    builds = _count_builds(store)
    task = MAILTask("t-1", "user:u", [])
    observer.task_changed(task)
    task.title = "first"
    observer.task_changed(task)
    task.title = "second"
    runtime.last_breakpoint_caller["t-1"] = "agent-a"
    observer.task_changed(task)
    assert store.pending_writes == 1  # one live write stands for all three changes
    assert builds[0] == 0  # nothing built before its batch is cut
    assert await store.flush(timeout=10)
    assert builds[0] == 1
    stored = (await store.load_instance(key)).tasks["t-1"]
    assert stored["title"] == "second"
    assert stored["breakpoint_caller"] == "agent-a"
    # A change after the batch was cut queues a write of its own, with the newest state.
    task.title = "third"
    observer.task_changed(task)
    assert store.pending_writes == 1
    assert await store.flush(timeout=10)
    assert builds[0] == 2
    assert (await store.load_instance(key)).tasks["t-1"]["title"] == "third"


async def test_a_full_buffer_writes_the_record_in_order_as_it_was_last(
    store: TaskStore,
) -> None:
    key = new_key()
    runtime = Runtime()
    observer = StoreObserver(runtime, store, key)  # type: ignore[arg-type]
    observer.start()
    task = MAILTask("t-2", "user:u", [])
    task.title = "queued"
    observer.task_changed(task)  # a live write
    for n in range(3):  # fill the buffer (room for 4)
        observer.response_set(f"other-{n}", {"n": n})
    assert store._buffer.full
    task.title = "behind the full buffer"
    observer.task_changed(task)  # the slow way: the waiting live write is frozen first
    task.title = "last"
    observer.task_changed(task)
    assert await observer.flush(timeout=10)
    stored = (await store.load_instance(key)).tasks["t-2"]
    assert stored["title"] == "last"
    await observer.close()
