"""A scratch PostgreSQL schema per test module, on the real server the tests use.

``MAIL_REQUIRE_POSTGRES=1`` (CI) turns an unreachable database into a failure, not a skip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import asyncpg
import pytest

T = TypeVar("T")

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

# The task store's tables, as `mail db-init` makes them (the idempotency keys', webhooks' and
# team tables come on top).
TASK_TABLES = (
    "agent_histories",
    "tasks",
    "task_events",
    "task_responses",
    "task_queues",
    "agent_memories",
    "instance_generations",
)


def with_search_path(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}search_path={schema}"


async def fetch_rows(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """The rows of one query, on a connection of its own."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


def _execute(base_url: str, sql: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(base_url, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    _run_apart(run())


def _run_apart(work: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(work)` in a thread of its own: a fixture may be requested from inside a
    running event loop (a module's fixture set up first for an async test)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


def postgres_answers(url: str) -> bool:
    """Whether PostgreSQL answers at `url` (asked in a thread of its own: `_run_apart`)."""

    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(url, timeout=3)
        except Exception:  # noqa: BLE001 - any failure: not reachable
            return False
        await conn.close()
        return True

    return _run_apart(probe())


def reachable_database(url: str) -> str:
    """`url` when PostgreSQL answers there (`postgres_answers`); otherwise the test is
    skipped (failed with ``MAIL_REQUIRE_POSTGRES=1``)."""
    if not postgres_answers(url):
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required but unreachable at {url}")
        pytest.skip("PostgreSQL not reachable (set MAIL_REQUIRE_POSTGRES=1 to make this fail)")
    return url


@contextlib.contextmanager
def scratch_schema(prefix: str, base_url: str = BASE_URL) -> Iterator[str]:
    """Create a uniquely named schema, yield its name, drop it (and everything in it)."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        _execute(base_url, f"CREATE SCHEMA {schema}")
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required but unreachable at {base_url}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {base_url}: {exc}")
    try:
        yield schema
    finally:
        _execute(base_url, f"DROP SCHEMA {schema} CASCADE")
