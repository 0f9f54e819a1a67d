"""What the store-level tests of the SQL write path share: a small buffered store that writes
only when flushed, a record of the batches it commits, and a stand-in runtime for a
`StoreObserver` (which holds its runtime weakly and, in these tests, never uses it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path
from tests.test_store_postgres import FAST

from mail.store import TaskStore
from mail.store.postgres import PostgresTaskStore
from mail.store.sql_batch import SqlWrite
from mail.store.sqlite import SqliteTaskStore


class NoRuntime:
    """Stands in for the runtime of a `StoreObserver`."""


def small_store(kind: str, tmp_path: Path, pg_url: str | None) -> TaskStore:
    """A SQLite or PostgreSQL store that writes nothing before a flush (batch_delay), with
    batches of 2 writes and room for 4 in its buffer."""
    options: dict[str, Any] = {"batch_delay": 5.0, "max_batch": 2, "max_pending": 4}
    if kind == "sqlite":
        return SqliteTaskStore(tmp_path / "mail.db", **options)
    assert pg_url is not None
    return PostgresTaskStore(pg_url, **{**FAST, **options})


@pytest.fixture(scope="module")
def small_store_pg_url() -> Iterator[str]:
    """A PostgreSQL schema of the test module's own, for `small_sql_store`."""
    with scratch_schema("mail_small_store", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


@pytest.fixture(params=["sqlite", "postgres"])
async def small_sql_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TaskStore]:
    """`small_store` on SQLite and on PostgreSQL, started, closed after the test."""
    pg_url = None
    if request.param == "postgres":
        pg_url = request.getfixturevalue("small_store_pg_url")
    made = small_store(request.param, tmp_path, pg_url)
    await made.start()
    yield made
    await made.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def quick_sql_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TaskStore]:
    """A SQLite or PostgreSQL store (the module's `small_store_pg_url` schema) that writes
    within milliseconds, started, closed after the test."""
    made: TaskStore
    if request.param == "sqlite":
        made = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
    else:
        made = PostgresTaskStore(request.getfixturevalue("small_store_pg_url"), **FAST)
    await made.start()
    yield made
    await made.close()


def record_batches(store: TaskStore) -> list[list[SqlWrite]]:
    """The batches `store` commits from now on, in order: by its writer, and (SQLite) by a
    flush that commits a lone task's batch itself."""
    batches: list[list[SqlWrite]] = []
    apply = store._buffer._apply

    async def applied(batch: Sequence[SqlWrite]) -> None:
        batches.append(list(batch))
        await apply(batch)

    store._buffer._apply = applied
    write_now = store._buffer._write_now
    if write_now is not None:

        def written_now(batch: list[SqlWrite]) -> bool:
            written = write_now(batch)
            if written:
                batches.append(list(batch))
            return written

        store._buffer._write_now = written_now
    return batches
