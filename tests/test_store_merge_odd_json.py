"""A task record's metadata merged by the database (SQLite's `mail_merge`, PostgreSQL's
`jsonb ||`) keeps every value exactly, whatever JSON it holds: integers beyond 64 bits,
unicode, keys with quotes, nulls, nesting. A non-finite number (beside a big integer, which
sends `to_json` to the stdlib) is stored as null on both, as orjson writes it; and a row
holding the stdlib's NaN must not stop the SQLite store: an error in `mail_merge` reaches
the writer as an OperationalError, taken for an outage and retried for ever, so no later
write of any task would land.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.support.sql_batches import quick_sql_store, small_store_pg_url  # noqa: F401 - fixtures
from tests.test_store_postgres import new_key

from mail.store import TaskStore
from mail.store.sqlite import SqliteTaskStore

BIG = 2**70 + 1  # read as a float it is 2**70
UPDATES: list[dict[str, Any]] = [
    {"state": "running", "n": 1, "keep": {"a": [1, 2]}},
    {"calls": [{"tool_args": {"amount": BIG, "neg": -(2**64) - 3}}]},
    {"u": "é\u2028☃ 😀 \x7f", 'k"q': 'v"\\', "n": None},
    {"deep": {"x": [{"y": {"z": [BIG, 1.5, -0.0, 10**30]}}]}, "max": 2**64 - 1},
    {"state": "completed", "keep": {"b": 2}},
]


def _expected() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for update in UPDATES:
        merged.update(update)
    return merged


async def test_merged_metadata_keeps_big_integers_and_odd_json_exactly(
    quick_sql_store: TaskStore,  # noqa: F811
) -> None:
    store = quick_sql_store
    key = new_key()
    for update in UPDATES:  # one write a batch: each one merged into the stored row
        await store.upsert_task(key, {"task_id": "t", **update})
        assert await store.flush(timeout=10)
    record = (await store.load_instance(key)).tasks["t"]
    got = {name: record[name] for name in _expected()}
    assert got == _expected()
    calls = record["calls"][0]["tool_args"]
    assert type(calls["amount"]) is int and calls["amount"] == BIG


async def test_a_non_finite_number_beside_a_big_integer_is_stored_as_null(
    quick_sql_store: TaskStore,  # noqa: F811
) -> None:
    store = quick_sql_store
    # {big int, inf}: orjson refuses the big int, so `to_json` takes the stdlib's path,
    # which wrote "Infinity": PostgreSQL refused the record (dropped), SQLite stored it and
    # then orjson could not read it back in `mail_merge`.
    key = new_key()
    await store.upsert_task(key, {"task_id": "t", "state": "running"})
    assert await store.flush(timeout=10)
    await store.upsert_task(key, {"task_id": "t", "x": BIG, "y": float("inf")})
    await store.upsert_task(key, {"task_id": "t2", "state": "running"})
    assert await store.flush(timeout=10), store.last_error
    await store.upsert_task(key, {"task_id": "t", "state": "completed"})
    assert await store.flush(timeout=10), store.last_error
    tasks = (await store.load_instance(key)).tasks
    assert tasks["t"]["state"] == "completed"
    assert tasks["t"]["x"] == BIG and type(tasks["t"]["x"]) is int
    assert tasks["t"]["y"] is None
    assert tasks["t2"]["state"] == "running"
    assert getattr(store, "dropped_writes", 0) == 0


async def test_sqlite_merges_into_a_row_an_older_version_left_with_nan(tmp_path: Path) -> None:
    # Text the stdlib wrote before (NaN beside a big integer): orjson refuses it, and an
    # error in `mail_merge` is an OperationalError the writer retried for ever.
    path = tmp_path / "mail.db"
    store = SqliteTaskStore(path, batch_delay=0.005, retry_max=0.2)
    await store.start()
    try:
        key = new_key()
        await store.upsert_task(key, {"task_id": "t", "state": "running"})
        assert await store.flush(timeout=10)
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE tasks SET metadata = ? WHERE task_id = 't'",
                ('{"state":"running","x":%d,"y":NaN}' % BIG,),  # noqa: UP031
            )
        await store.upsert_task(key, {"task_id": "t", "state": "completed"})
        await store.upsert_task(key, {"task_id": "t2", "state": "running"})
        assert await store.flush(timeout=10), store.last_error
        tasks = (await store.load_instance(key)).tasks
        assert tasks["t"]["state"] == "completed" and tasks["t"]["x"] == BIG
        assert tasks["t2"]["state"] == "running"
    finally:
        await store.close()
