"""Task writes merged in a batch never cross a lease: a takeover between two writes of one
task record in the same batch (SQLite and the real PostgreSQL server).

The writes made under the superseded generation are dropped whole; none of their columns
or metadata keys may reach the row through the write made under the new generation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.support.pg_schema import scratch_schema, with_search_path
from tests.test_store_postgres import BASE_URL, FAST, new_key

from mail.store import TaskStore
from mail.store.postgres import PostgresTaskStore
from mail.store.sqlite import SqliteTaskStore

OLD = {
    "task_id": "t-1",
    "task_owner": "user:old@demo",
    "task_contributors": ["user:old@demo"],
    "remote_swarms": ["old-peer"],
    "is_running": True,
    "completed": False,
    "title": "old holder",
    "start_time": "2025-03-01T10:20:30.123456+00:00",
    "state": "running",
    "old_only": 1,
}
NEW = {"task_id": "t-1", "is_running": False, "completed": True, "state": "completed"}


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_a40_fence", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


def _open(kind: str, tmp_path: Path, pg_url: str) -> TaskStore:
    if kind == "sqlite":  # two stores of one file share its connection (open_database)
        return SqliteTaskStore(tmp_path / "mail.db", batch_delay=5.0)
    return PostgresTaskStore(pg_url, **{**FAST, "batch_delay": 5.0})


@pytest.fixture(params=["sqlite", "postgres"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[TaskStore, TaskStore]]:
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else ""
    old, new = _open(request.param, tmp_path, url), _open(request.param, tmp_path, url)
    await old.start()
    await new.start()
    yield old, new
    await old.close()
    await new.close()


async def test_writes_merged_under_a_superseded_lease_are_dropped_whole(
    stores: tuple[TaskStore, TaskStore],
) -> None:
    old, new = stores
    key = new_key()
    assert await old.claim_generation(key, "old") == 1
    assert old.write_nowait(key, "upsert_task", OLD)  # both in one batch, under generation 1
    assert new.write_nowait(key, "upsert_task", {**NEW, "title": "new holder"})
    assert await new.flush(timeout=10)
    assert await new.claim_generation(key, "new") == 2  # the takeover
    assert old.write_nowait(key, "upsert_task", NEW)
    assert await old.flush(timeout=10)
    record = (await new.load_instance(key)).tasks["t-1"]
    # Nothing of the superseded holder's two writes (merged into one) reached the row.
    assert "old_only" not in record, record
    assert record["title"] == "new holder" and record["remote_swarms"] == [], record
    assert record["task_owner"] == "", record
