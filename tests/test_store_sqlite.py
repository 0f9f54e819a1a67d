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


def _layout(conn: sqlite3.Connection) -> dict[str, object]:
    """What the code relies on in each table: its columns and types, its keys (unique
    indexes, the ON CONFLICT targets), its other indexes and whether it has rowids."""
    layout: dict[str, object] = {}
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
        if name == "sqlite_sequence":
            continue
        indexes = set()
        for _seq, index, unique, _origin, _partial in conn.execute(f"PRAGMA index_list({name})"):
            columns = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({index})"))
            indexes.add((bool(unique), columns))
        columns = {r[1]: r[2] for r in conn.execute(f"PRAGMA table_info({name})")}
        layout[name] = (columns, indexes, "WITHOUT ROWID" not in sql.upper())
    return layout


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_a_file_of_each_earlier_version_is_brought_to_todays_tables_with_its_rows(
    tmp_path: Path, version: int
) -> None:
    from tests.support.old_sqlite import write_schema

    fresh = connect(tmp_path / "new.db")
    migrate(fresh)
    old = connect(tmp_path / "old.db")
    write_schema(old, version)
    key = "'s', 'user', 'u'"
    for n in (3, 1, 2):  # events keep their sequence numbers (and so their order)
        old.execute(
            "INSERT INTO task_events (seq, swarm_name, caller_role, caller_id, task_id,"
            f" event_type) VALUES ({n}, {key}, 't', 'e{n}')"
        )
    old.execute(
        "INSERT INTO agent_histories (swarm_name, caller_role, caller_id, task_id, agent_name,"
        f" tool_format, history) VALUES ({key}, 't', 'a', 'completions', '[1, 2]')"
    )
    if version >= 3:
        old.execute(
            "INSERT INTO idempotency_keys (swarm_name, caller_role, caller_id, idem_key,"
            f" fingerprint, created_at, expires_at, body) VALUES ({key}, 'k', 'f', 1, 2, x'7b')"
        )
    assert migrate(old) == list(range(version + 1, SCHEMA_VERSION + 1))
    assert _layout(old) == _layout(fresh)

    def rows(sql: str) -> list[tuple[object, ...]]:
        return [tuple(row) for row in old.execute(sql)]

    assert rows("SELECT seq, event_type FROM task_events ORDER BY seq") == [
        (1, "e1"),
        (2, "e2"),
        (3, "e3"),
    ]
    assert rows("SELECT history, start FROM agent_histories") == [("[1, 2]", 0)]
    keys = rows("SELECT idem_key, body FROM idempotency_keys")
    assert keys == ([("k", b"{")] if version >= 3 else [])
    assert old.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert migrate(old) == []
    old.close()
    fresh.close()


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
