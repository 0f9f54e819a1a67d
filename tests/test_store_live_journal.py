"""A running task's journal as a live write (`mail.store.sql_batch.LiveWrite`), on SQLite and
PostgreSQL: read when its batch is cut, one write per task per batch, and never ahead of a
write queued before the change it reads (the history a finished turn saved).
"""

from __future__ import annotations

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
from mail.core.runtime_durable import journal_key
from mail.store import TaskStore

_HOST = NoRuntime()


@pytest.fixture
def store(small_sql_store: TaskStore) -> TaskStore:  # noqa: F811
    return small_sql_store


class Journal:
    """A task's pending work as the runtime's journal hands it to the observer."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] | None = None
        self.reads = 0

    def read(self, task_id: str) -> list[dict[str, Any]] | None:
        self.reads += 1
        return None if self.items is None else [dict(i) for i in self.items]


def _entry(n: int, taken: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": "inbox", "agent": "a", "priority": 3, "seq": n}
    if taken:
        entry["taken_by"] = "turn-1"
    return entry


HISTORY = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "done"}]


async def test_changes_before_a_batch_are_one_write_of_the_latest_state(
    store: TaskStore,
) -> None:
    key = new_key()
    observer = StoreObserver(_HOST, store, key)  # type: ignore[arg-type]
    observer.stored_queues([])
    journal = Journal()
    batches = record_batches(store)
    for n in range(1, 6):  # five changes of one task's pending work
        journal.items = [_entry(i) for i in range(1, n + 1)]
        assert observer.journal_touched("t-1", journal.read)
    assert store.pending_writes == 1  # one live write stands for all five
    assert journal.reads == 0  # nothing read before its batch is cut
    assert await store.flush(timeout=10)
    assert journal.reads == 1
    snapshot = await store.load_instance(key)
    assert [i["seq"] for i in snapshot.queues[journal_key("t-1")]] == [1, 2, 3, 4, 5]
    # A change after the batch was cut needs a write of its own.
    journal.items = None
    assert observer.journal_touched("t-1", journal.read)
    assert store.pending_writes == 1
    assert await store.flush(timeout=10)
    snapshot = await store.load_instance(key)
    assert journal_key("t-1") not in snapshot.queues
    assert [w.kind for b in batches for w in b] == ["queue", "queue_delete"]


async def test_a_live_write_is_not_written_ahead_of_the_history_it_follows(
    store: TaskStore,
) -> None:
    """The turn's history is queued behind two events (a batch is 2 writes), then the turn
    ends: the journal drops its message. The batch that writes the journal without it must
    write the history too, or a crash between two batches loses the turn's work."""
    key = new_key()
    observer = StoreObserver(_HOST, store, key)  # type: ignore[arg-type]
    observer.stored_queues([])
    journal = Journal()
    batches = record_batches(store)
    journal.items = [_entry(1, taken=True), _entry(2)]
    assert observer.journal_touched("t-1", journal.read)
    for n in range(2):
        assert store.write_nowait(key, "append_event", "t-1", {"event": "e", "data": f"{n}"})
    assert store.write_nowait(key, "save_history", "t-1", "a", None, HISTORY)
    journal.items = [_entry(2)]  # the turn finished: its message is done
    assert observer.journal_touched("t-1", journal.read)
    assert await store.flush(timeout=10)
    for batch in batches:
        kinds = [w.kind for w in batch]
        if "queue" in kinds and len(batch[kinds.index("queue")].args[-1]) == 1:
            # In the batch, and behind it (a batch the database rejects is retried one
            # write at a time, in order).
            assert "history" in kinds, kinds
            assert kinds.index("history") < kinds.index("queue"), kinds
    snapshot = await store.load_instance(key)
    assert [i["seq"] for i in snapshot.queues[journal_key("t-1")]] == [2]
    assert snapshot.histories[("t-1", "a")] == HISTORY


async def test_a_live_write_waiting_when_writes_back_up_keeps_the_state_of_then(
    store: TaskStore,
) -> None:
    """When the buffer is full, later writes wait in the observer's drain, behind the
    buffer: a live write read after that would be ahead of them. It is read at once."""
    key = new_key()
    observer = StoreObserver(_HOST, store, key)  # type: ignore[arg-type]
    observer.stored_queues([])
    observer.start()
    journal = Journal()
    batches = record_batches(store)
    journal.items = [_entry(1, taken=True)]
    assert observer.journal_touched("t-1", journal.read)
    for n in range(3):  # the buffer holds 4 writes: now it is full
        observer._put("append_event", "t-1", {"event": "e", "data": f"{n}"})
    observer.history_changed("t-1", "a", "completions", HISTORY)  # waits in the drain
    journal.items = [_entry(2)]  # the turn finished
    # Behind the drain: no live write; the journal writes its items itself.
    assert not observer.journal_touched("t-1", journal.read)
    observer.journal_changed("t-1", journal.read("t-1"))
    assert await observer.flush(timeout=10)
    first = [w for w in batches[0] if w.kind in ("queue", "history")]
    # The first batch (the buffer's 4 writes) has the journal as it was when the history
    # went to the drain: the turn's message still taken, so a crash re-runs the turn.
    assert [w.kind for w in first] == ["queue"], [w.kind for b in batches for w in b]
    assert "taken_by" in first[0].args[-1][0]
    snapshot = await store.load_instance(key)
    assert [i["seq"] for i in snapshot.queues[journal_key("t-1")]] == [2]
    assert snapshot.histories[("t-1", "a")] == HISTORY
    await observer.close()
