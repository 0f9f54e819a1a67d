"""Random sequences of task writes: one batch leaves what one-by-one writes leave.

The SQL stores merge successive writes of one task record within a batch
(`sql_base.coalesce_writes`). Whatever the sequence (whole records, partial updates,
columns set to None, metadata keys dropped, changed, nested or null, other tasks' and
other kinds' writes in between), the rows a batch leaves must equal those of writing each
record in its own transaction. Run on SQLite and the real PostgreSQL server.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tests.support.sql_batches import quick_sql_store, small_store_pg_url  # noqa: F401 - fixtures
from tests.test_store_postgres import new_key

from mail.store import TaskStore
from mail.store.sqlite import SqliteTaskStore

TASK_IDS = ("t-a", "t-b", "t-c")
COLUMN_VALUES: dict[str, list[Any]] = {
    "task_owner": [None, "user:u1@demo", "agent:x@other", ""],
    "task_contributors": [None, [], ["user:u1@demo"], ["a", "b"]],
    "remote_swarms": [None, [], ["other"]],
    "is_running": [None, True, False],
    "completed": [None, True, False],
    "title": [None, "", "first", "second"],
    "start_time": [None, "2025-03-01T10:20:30.123456+00:00", "2025-03-02T00:00:00+00:00"],
}
META_VALUES: list[Any] = [
    None,
    0,
    "",
    "running",
    "paused",
    "completed",
    [],
    [{"call_id": "c1"}],
    {},
    {"x": 1},
    {"x": {"y": 2}},
]
META_KEYS = ("state", "breakpoint_calls", "summary", "status", "cancel_reason")


def _record(rng: random.Random) -> dict[str, Any]:
    record: dict[str, Any] = {"task_id": rng.choice(TASK_IDS)}
    for name, values in COLUMN_VALUES.items():
        if rng.random() < 0.7:
            record[name] = rng.choice(values)
    for name in META_KEYS:
        if rng.random() < 0.5:
            record[name] = rng.choice(META_VALUES)
    return record


def _records(rng: random.Random) -> list[dict[str, Any]]:
    records = [_record(rng) for _ in range(rng.randint(2, 9))]
    seen: set[str] = set()
    for record in records:  # a first write without a start time would store "now"
        if record["task_id"] not in seen and record.get("start_time") is None:
            record["start_time"] = COLUMN_VALUES["start_time"][1]
        seen.add(record["task_id"])
    return records


async def test_random_task_write_sequences_batched_equal_one_by_one(
    quick_sql_store: TaskStore,  # noqa: F811
) -> None:
    store = quick_sql_store
    nowait = getattr(store, "write_nowait")  # noqa: B009 - SQL stores only
    for seed in range(300):
        rng = random.Random(seed)
        records = _records(rng)
        one_by_one, batched = new_key(), new_key()
        for i, record in enumerate(records):
            await store.upsert_task(one_by_one, record)
            if rng.random() < 0.3:
                event = {"event": "new_message", "data": "{}", "id": str(i)}
                await store.append_event(one_by_one, record["task_id"], event)
            await store.flush()
        rng = random.Random(seed)  # the same draws again
        records = _records(rng)
        for i, record in enumerate(records):  # one tick: one batch
            assert nowait(batched, "upsert_task", record)
            if rng.random() < 0.3:
                event = {"event": "new_message", "data": "{}", "id": str(i)}
                assert nowait(batched, "append_event", record["task_id"], event)
        assert await store.flush(timeout=10)
        expected = (await store.load_instance(one_by_one)).tasks
        got = (await store.load_instance(batched)).tasks
        assert got == expected, (seed, records)


async def test_merged_writes_keep_sqlite_insertion_order_for_equal_start_times(
    tmp_path: Path,
) -> None:
    # load_instance orders tasks by start time, then insertion order (sql_base's
    # snapshot_queries; SQLite's rowid). A task created, then another, then the first one
    # updated in the same batch must come back first, as when written one at a time.
    store = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
    await store.start()
    try:
        when = "2025-03-01T10:20:30+00:00"
        records = [
            {"task_id": "t1", "start_time": when, "state": "running"},
            {"task_id": "t2", "start_time": when, "state": "running"},
            {"task_id": "t1", "start_time": when, "state": "completed"},
        ]
        one_by_one, batched = new_key(), new_key()
        for record in records:
            await store.upsert_task(one_by_one, record)
            assert await store.flush(timeout=10)
        for record in records:
            assert store.write_nowait(batched, "upsert_task", record)
        assert await store.flush(timeout=10)
        assert list((await store.load_instance(one_by_one)).tasks) == ["t1", "t2"]
        assert list((await store.load_instance(batched)).tasks) == ["t1", "t2"]
    finally:
        await store.close()
