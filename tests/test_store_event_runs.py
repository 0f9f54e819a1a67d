"""A task's events as one queued write per batch (`mail.store.sql_batch.EventRun`), on SQLite
and PostgreSQL: events that arrive before their batch is cut join their task's run, are
encoded when the batch takes it, and come back in the order they happened, also when an
outbox event or a full buffer closes a run and later events queue behind other writes.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.sql_batches import (  # noqa: F401 - fixtures
    NoRuntime,
    record_batches,
    small_sql_store,
    small_store,
    small_store_pg_url,
)
from tests.test_store_postgres import new_key

from mail.api.persistence import StoreObserver
from mail.core.events import TaskEvent
from mail.store import TaskStore

_HOST = NoRuntime()


@pytest.fixture
def store(small_sql_store: TaskStore) -> TaskStore:  # noqa: F811
    return small_sql_store


def _task(task_id: str) -> Any:
    return SimpleNamespace(task_id=task_id)


def _event(task_id: str, name: str, n: int) -> TaskEvent:
    return TaskEvent(name, task_id, f"step {n}", {"n": n}, event_id=f"{task_id}-{n}")


def _stored(events: list[dict[str, Any]]) -> list[int]:
    return [json.loads(e["data"])["extra_data"]["n"] for e in events]


class _Outbox:
    """Push delivery that wants the events named "hook" (one outbox row each)."""

    def rows_for_event(self, task: Any, event: TaskEvent) -> list[Any]:
        if event.event != "hook":
            return []
        payload = json.dumps({"id": event.id})
        return [(f"evt-{event.id}", task.task_id, "task.hook", payload, time.time())]

    def rows_for_answer(self, task_id: str, task: Any, response: dict[str, Any]) -> list[Any]:
        return []

    def record(self, rows: list[Any]) -> None:
        raise AssertionError("a SQL store writes outbox rows itself")

    def kick(self) -> None:
        pass


async def test_events_before_a_batch_are_one_write_and_keep_their_order(
    store: TaskStore,
) -> None:
    key = new_key()
    observer = StoreObserver(_HOST, store, key)  # type: ignore[arg-type]
    batches = record_batches(store)
    for n in range(6):  # two tasks' events, interleaved
        observer.event_added(_task("t-1"), _event("t-1", "e", n))
        observer.event_added(_task("t-2"), _event("t-2", "e", n))
    assert store.pending_writes == 2  # one run per task stands for all twelve
    assert await store.flush(timeout=10)
    assert [w.kind for b in batches for w in b] == ["event_rows", "event_rows"]
    assert not observer._runs  # a run taken by a batch is no longer open
    # An event after the batch was cut starts a new run.
    observer.event_added(_task("t-1"), _event("t-1", "e", 6))
    assert store.pending_writes == 1
    assert await store.flush(timeout=10)
    snapshot = await store.load_instance(key)
    assert _stored(snapshot.events["t-1"]) == [0, 1, 2, 3, 4, 5, 6]
    assert _stored(snapshot.events["t-2"]) == [0, 1, 2, 3, 4, 5]
    assert [e["id"] for e in snapshot.events["t-2"]][:2] == ["t-2-0", "t-2-1"]


async def test_an_outbox_event_closes_the_run_so_later_events_follow_it(
    store: TaskStore,
) -> None:
    """An event with outbox rows is queued as a write of its own; an event after it must not
    join the run queued before it (it would be stored ahead of the outbox event)."""
    key = new_key()
    observer = StoreObserver(_HOST, store, key)  # type: ignore[arg-type]
    observer.outbox = _Outbox()
    batches = record_batches(store)
    observer.event_added(_task("t-1"), _event("t-1", "e", 0))
    observer.event_added(_task("t-1"), _event("t-1", "hook", 1))
    observer.event_added(_task("t-1"), _event("t-1", "e", 2))
    assert [w.kind for w in store._buffer._queue] == ["run", "outbox", "run"]
    assert await store.flush(timeout=10)
    assert [w.kind for b in batches for w in b] == ["event_rows", "outbox", "event_rows"]
    snapshot = await store.load_instance(key)
    assert _stored(snapshot.events["t-1"]) == [0, 1, 2]


async def test_events_behind_a_full_buffer_queue_behind_the_waiting_writes(
    store: TaskStore,
) -> None:
    """When the buffer is full, later writes wait in the observer's drain: an event must not
    join a run in the buffer then (it would be stored ahead of the events in the drain)."""
    key = new_key()
    observer = StoreObserver(_HOST, store, key)  # type: ignore[arg-type]
    observer.start()
    observer.event_added(_task("t-1"), _event("t-1", "e", 0))  # a run in the buffer
    for n in range(3):  # the buffer holds 4 writes: now it is full
        assert store.write_nowait(key, "save_response", f"other-{n}", {"n": n})
    observer.event_added(_task("t-2"), _event("t-2", "e", 0))  # to the drain
    observer.event_added(_task("t-1"), _event("t-1", "e", 1))  # behind it, not in the run
    observer.event_added(_task("t-1"), _event("t-1", "e", 2))
    assert len(store._buffer._queue[0].args[1].events) == 1
    assert await observer.flush(timeout=10)
    snapshot = await store.load_instance(key)
    assert _stored(snapshot.events["t-1"]) == [0, 1, 2]
    assert _stored(snapshot.events["t-2"]) == [0]
    await observer.close()


async def test_an_event_the_database_refuses_costs_that_event_alone(
    store: TaskStore,
) -> None:
    """A run is one write: when the database rejects it (here text with a lone surrogate,
    which neither SQLite nor PostgreSQL stores: the HTTP API refuses it in bodies, but a
    model's or a tool's JSON `"\\ud800"` decodes to one), its events are retried one by one,
    so the task keeps its other events of the batch, as it did when each event was a write
    of its own."""
    key = new_key()
    observer = StoreObserver(_HOST, store, key)  # type: ignore[arg-type]
    for n, text in enumerate(["fine", "bad \ud800", "fine too"]):
        observer.event_added(_task("t-1"), TaskEvent("e", "t-1", text, {"n": n}, event_id=str(n)))
    observer.event_added(_task("t-2"), _event("t-2", "e", 0))
    assert await store.flush(timeout=10)
    snapshot = await store.load_instance(key)
    assert _stored(snapshot.events["t-1"]) == [0, 2]
    assert _stored(snapshot.events["t-2"]) == [0]
    assert store.dropped_writes == 1
