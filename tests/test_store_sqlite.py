"""What is specific to the SQLite store: the file, its schema versions, store selection."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mail.config import StoreConfig
from mail.store import InstanceKey, StoreUnavailableError, server_store, store_kind
from mail.store.sqlite import SqliteTaskStore
from mail.store.sqlite_schema import MIGRATIONS, SCHEMA_VERSION, connect, migrate

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


async def test_a_version_5_file_is_upgraded_with_its_events_and_histories(
    tmp_path: Path,
) -> None:
    """Migration 6 rebuilds task_events and agent_histories (fewer pages per commit): every
    row is kept, events written after it come after the old ones, and a history's segments
    still join and are replaced whole."""
    path = tmp_path / "mail.db"
    conn = connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, statements in MIGRATIONS[:5]:
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, '')", (version,))
    key = (KEY.swarm_name, KEY.caller_role, KEY.caller_id, "t")
    for n in range(3):
        conn.execute(
            "INSERT INTO task_events (swarm_name, caller_role, caller_id, task_id, event_type,"
            " event_data, event_id) VALUES (?, ?, ?, ?, 'e', ?, ?)",
            (*key, f"old {n}", str(n)),
        )
    conn.execute("DELETE FROM task_events WHERE event_id = '2'")  # the largest seq
    for start, part in ((0, '[{"n": 0}, {"n": 1}]'), (2, '[{"n": 2}]')):
        conn.execute(
            "INSERT INTO agent_histories (swarm_name, caller_role, caller_id, task_id,"
            " agent_name, tool_format, history, start) VALUES (?, ?, ?, ?, 'a', 'completions',"
            " ?, ?)",
            (*key, part, start),
        )
    conn.close()

    store = SqliteTaskStore(path)
    await store.start()
    try:
        await store.append_event(KEY, "t", {"event": "e", "data": "new", "id": "3"})
        snap = await store.load_instance(KEY)
        assert [e["data"] for e in snap.events["t"]] == ["old 0", "old 1", "new"]
        assert snap.histories[("t", "a")] == [{"n": 0}, {"n": 1}, {"n": 2}]
        await store.save_history(KEY, "t", "a", "completions", [{"n": 9}])  # whole again
        assert (await store.load_instance(KEY)).histories[("t", "a")] == [{"n": 9}]
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert max(r[0] for r in conn.execute("SELECT version FROM schema_version")) == 6
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
