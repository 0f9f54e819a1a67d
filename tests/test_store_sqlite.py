"""What is specific to the SQLite store: the file, its schema versions, store selection."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mail.config import StoreConfig
from mail.store import InstanceKey, StoreUnavailableError, server_store, store_kind
from mail.store.sqlite import SqliteTaskStore
from mail.store.sqlite_schema import SCHEMA_VERSION, connect, migrate

KEY = InstanceKey("demo", "user", "u-1")


async def test_a_reopened_file_has_everything_and_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "data" / "mail.db"
    store = SqliteTaskStore(path)
    await store.start()
    await store.upsert_task(KEY, {"task_id": "t", "is_running": True, "note": {"a": 1}})
    await store.append_event(KEY, "t", {"event": "e", "data": "d", "id": "1"})
    await store.close()  # flushes

    again = SqliteTaskStore(path)
    await again.start()
    snap = await again.load_instance(KEY)
    await again.close()
    assert snap.tasks["t"]["is_running"] is True and snap.tasks["t"]["note"] == {"a": 1}
    assert snap.events["t"] == [{"event": "e", "data": "d", "id": "1"}]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


def test_migrations_apply_once_and_a_newer_file_is_refused(tmp_path: Path) -> None:
    conn = connect(tmp_path / "x.db")
    assert migrate(conn) == list(range(1, SCHEMA_VERSION + 1))
    assert migrate(conn) == []
    conn.execute("INSERT INTO schema_version VALUES (?, '')", (SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="newer than this version"):
        migrate(conn)
    conn.close()


def test_store_selection(tmp_path: Path) -> None:
    url = "postgresql://u@localhost/db"
    assert store_kind("sqlite", None) == "sqlite"
    assert store_kind("sqlite", url) == "postgres"  # DATABASE_URL still selects PostgreSQL
    assert store_kind("memory", url) == "memory"  # --store memory wins
    assert store_kind("sqlite", "none") == "sqlite"
    with pytest.raises(StoreUnavailableError, match="needs DATABASE_URL"):
        store_kind("postgres", None)
    assert server_store("memory", tmp_path / "m.db", None) is None
    assert isinstance(server_store("sqlite", tmp_path / "m.db", None), SqliteTaskStore)
    assert StoreConfig().database_path("registries/demo.json") == Path("data/mail.db")
    assert StoreConfig(path="/x/y.db").database_path("registries/demo.json") == Path("/x/y.db")
