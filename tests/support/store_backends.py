"""The durable stores a real `mail server` can run on, for kill -9 tests.

`durable_store` is a fixture parametrized over "sqlite" (the default: no DATABASE_URL, the
server started the way the README says) and "postgres" (DATABASE_URL). Its `fetch` queries
what the server really stored, in either database ($1-style parameters for both).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.pg_schema import BASE_URL, fetch_rows, scratch_schema, with_search_path


@dataclass
class DurableStore:
    kind: str  # "sqlite" | "postgres"
    directory: Path  # the server's scratch folder (its data/ folder for SQLite)
    database_url: str | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"DATABASE_URL": self.database_url} if self.database_url else {}

    @property
    def sqlite_path(self) -> Path:
        return self.directory / "data" / "mail.db"

    def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        if self.kind == "postgres":
            return [dict(row) for row in _pg_fetch(self.database_url or "", sql, args)]
        if not self.sqlite_path.exists():
            return []
        conn = sqlite3.connect(self.sqlite_path, timeout=10)
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute(re.sub(r"\$\d+", "?", sql), args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            conn.close()
        return [dict(row) for row in rows]


def _pg_fetch(url: str, sql: str, args: tuple[Any, ...]) -> list[Any]:
    return asyncio.run(fetch_rows(url, sql, *args))


@pytest.fixture(params=["sqlite", "postgres"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> DurableStore:
    if request.param == "postgres":
        url = request.getfixturevalue("database")  # skips (or fails) without PostgreSQL
        return DurableStore("postgres", tmp_path, url)
    return DurableStore("sqlite", tmp_path)


@contextlib.contextmanager
def scratch_durable_store(kind: str, directory: Path, prefix: str) -> Iterator[DurableStore]:
    """A durable store of its own: the server's default SQLite file in `directory`, or a
    PostgreSQL schema named after `prefix`, dropped on exit (the shared database may hold
    other runs' rows, or other tests' tables)."""
    if kind == "sqlite":
        yield DurableStore("sqlite", directory)
        return
    with scratch_schema(prefix, BASE_URL) as schema:
        yield DurableStore("postgres", directory, with_search_path(BASE_URL, schema))


def scratch_store_fixture(prefix: str) -> Any:
    """A `durable_store` fixture over "sqlite" and "postgres" whose PostgreSQL side is a schema
    of its own named after `prefix` (see `scratch_durable_store`); a test module assigns it:
    ``durable_store = scratch_store_fixture("mail_x")``."""

    @pytest.fixture(params=["sqlite", "postgres"], name="durable_store")
    def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableStore]:
        with scratch_durable_store(request.param, tmp_path, prefix) as store:
            yield store

    return durable_store
