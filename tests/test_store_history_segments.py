"""Agent histories stored as appended segments (SQLite and PostgreSQL, real databases).

A save that extends what the store queued before writes the new messages alone (a row whose
`start` is the index of its first message); anything else writes the history whole (one row,
start 0). Reads join the rows in order. Databases written before segments (one whole row per
history, no `start`) are upgraded in place and read back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from tests.support.old_sqlite import write_schema
from tests.support.pg_schema import fetch_rows, scratch_schema, with_search_path
from tests.support.stub_agents import stub_swarms_json
from tests.test_store_postgres import BASE_URL, FAST, new_key

from mail.store import InstanceKey, TaskStore
from mail.store.postgres import PostgresTaskStore
from mail.store.sqlite import SqliteTaskStore
from mail.store.sqlite_schema import connect
from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    start_on_a_free_port,
    write_config,
)

pytestmark = pytest.mark.timeout(120)

Place = tuple[str, str]  # (kind, where: the SQLite file or the PostgreSQL URL)


@pytest.fixture(params=["sqlite", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    if request.param == "sqlite":
        yield ("sqlite", str(tmp_path / "mail.db"))
        return
    with scratch_schema("mail_segments", BASE_URL) as schema:
        yield ("postgres", with_search_path(BASE_URL, schema))


def open_store(place: Place) -> TaskStore:
    kind, where = place
    if kind == "sqlite":
        return SqliteTaskStore(where, batch_delay=0.005)
    return PostgresTaskStore(where, **FAST)


async def stored_rows(place: Place, key: InstanceKey) -> list[tuple[str, int, int]]:
    """(agent, start, messages) of the key's history rows, in order."""
    kind, where = place
    sql = (
        "SELECT agent_name, start, history FROM agent_histories"
        " WHERE swarm_name = {} AND caller_id = {} ORDER BY agent_name, start"
    )
    if kind == "sqlite":
        conn = sqlite3.connect(where)
        try:
            found = conn.execute(sql.format("?", "?"), (key.swarm_name, key.caller_id)).fetchall()
        finally:
            conn.close()
    else:
        found = await fetch_rows(where, sql.format("$1", "$2"), key.swarm_name, key.caller_id)
    return [(r[0], r[1], len(json.loads(r[2]))) for r in found]


def contiguous(rows: list[tuple[str, int, int]]) -> bool:
    """Each agent's rows start at 0 and each starts where the one before it ended."""
    ends: dict[str, int] = {}
    for agent, start, count in rows:
        if start != ends.get(agent, 0):
            return False
        ends[agent] = start + count
    return True


def turn(history: list[dict[str, Any]], n: int) -> None:
    history.append({"role": "user", "content": f"ask {n}"})
    history.append({"role": "assistant", "content": f"answer {n}", "turn": n})


async def history_of(store: TaskStore, key: InstanceKey, agent: str = "worker") -> Any:
    return (await store.load_instance(key)).histories.get(("t-1", agent))


async def save(store: TaskStore, key: InstanceKey, history: list[dict[str, Any]]) -> None:
    """As the runtime's observer saves: the live list, taken at once."""
    assert store.write_nowait(key, "save_history", "t-1", "worker", "completions", history)  # type: ignore[attr-defined]


async def test_a_long_history_is_read_back_whole_after_a_restart(place: Place) -> None:
    key = new_key()
    history: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    store = open_store(place)
    await store.start()
    try:
        for n in range(40):  # one batch per turn: one row per turn
            turn(history, n)
            await save(store, key, history)
            assert await store.flush(10)
        rows = await stored_rows(place, key)
        assert len(rows) == 40 and contiguous(rows)
        assert [r[2] for r in rows] == [3] + [2] * 39  # the first whole, then each turn's
        assert await history_of(store, key) == history
    finally:
        await store.close()

    again = open_store(place)  # a restart: nothing remembered, the first save is whole
    await again.start()
    try:
        assert await history_of(again, key) == history
        turn(history, 40)
        await save(again, key, history)
        assert await again.flush(10)
        assert await stored_rows(place, key) == [("worker", 0, len(history))]
        turn(history, 41)
        await save(again, key, history)
        assert await again.flush(10)
        assert await stored_rows(place, key) == [
            ("worker", 0, len(history) - 2),
            ("worker", len(history) - 2, 2),
        ]
        assert await history_of(again, key) == history
    finally:
        await again.close()


async def test_many_saves_append_and_never_rewrite_the_history(place: Place) -> None:
    """However many turns, a turn writes its own messages: no whole rewrite of the history
    every k saves (n^2/k messages written over n turns)."""
    key = new_key()
    history: list[dict[str, Any]] = []
    store = open_store(place)
    await store.start()
    try:
        saves = 150
        for n in range(saves):
            turn(history, n)
            await save(store, key, history)
            assert await store.flush(10)
        rows = await stored_rows(place, key)
        # the first save whole, then one segment of 2 messages per save
        assert rows == [("worker", 0, 2)] + [("worker", 2 * n, 2) for n in range(1, saves)]
        assert await history_of(store, key) == history
    finally:
        await store.close()


async def test_a_history_made_shorter_is_stored_as_the_runtime_has_it(place: Place) -> None:
    key = new_key()
    history: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    store = open_store(place)
    await store.start()
    try:
        for n in range(10):
            turn(history, n)
            await save(store, key, history)
            assert await store.flush(10)
        # compression (api/compression.py): a run of messages becomes one summary
        history[1:9] = [{"role": "user", "content": "summary of turns 0-3"}]
        await save(store, key, history)
        assert await store.flush(10)
        assert await history_of(store, key) == history
        assert await stored_rows(place, key) == [("worker", 0, len(history))]
        # a cancelled turn cut back (runtime_turns), then new turns
        del history[-3:]
        await save(store, key, history)
        turn(history, 20)
        await save(store, key, history)
        assert await store.flush(10)
        assert await history_of(store, key) == history
        # in one batch: a segment, an edit in the middle (runtime_review: a copy of the
        # entry), a segment on top of it: one row, whole
        turn(history, 21)
        await save(store, key, history)
        history[2] = {**history[2], "content": "edited"}
        await save(store, key, history)
        turn(history, 22)
        await save(store, key, history)
        assert await store.flush(10)
        assert await stored_rows(place, key) == [("worker", 0, len(history))]
        assert await history_of(store, key) == history
    finally:
        await store.close()


async def test_a_segment_not_stored_makes_the_next_save_whole(
    place: Place, caplog: pytest.LogCaptureFixture
) -> None:
    key = new_key()
    history: list[dict[str, Any]] = []
    store = open_store(place)
    await store.start()
    try:
        turn(history, 0)
        await save(store, key, history)
        assert await store.flush(10)
        loop: dict[str, Any] = {}
        loop["itself"] = loop
        broken: dict[str, Any] = {"role": "user", "content": loop}  # no JSON text for it
        history.append(broken)
        with caplog.at_level(logging.ERROR, logger="mail.store"):
            await save(store, key, history)
            assert await store.flush(10)
        assert "cannot be encoded" in caplog.text
        broken["content"] = "fixed"  # the same message object, now storable
        turn(history, 1)
        await save(store, key, history)  # not just the new turn: the fixed message too
        assert await store.flush(10)
        assert await history_of(store, key) == history
        assert await stored_rows(place, key) == [("worker", 0, len(history))]
    finally:
        await store.close()


async def test_a_history_missing_a_segment_reads_as_it_was_before_the_gap(place: Place) -> None:
    # A segment the writer dropped while the history's later segments were already queued:
    # those later rows do not follow on, and the history reads as it was before them.
    key = new_key()
    history: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    store = open_store(place)
    await store.start()
    try:
        for n in range(4):
            turn(history, n)
            await save(store, key, history)
            assert await store.flush(10)
        assert await stored_rows(place, key) == [("worker", 0, 3)] + [
            ("worker", start, 2) for start in (3, 5, 7)
        ]
    finally:
        await store.close()
    kind, where = place
    if kind == "sqlite":
        conn = sqlite3.connect(where)
        try:
            with conn:
                conn.execute("DELETE FROM agent_histories WHERE start = 5")
        finally:
            conn.close()
    else:
        conn_pg = await asyncpg.connect(where, timeout=10)
        try:
            await conn_pg.execute("DELETE FROM agent_histories WHERE start = 5")
        finally:
            await conn_pg.close()
    again = open_store(place)
    await again.start()
    try:
        assert await history_of(again, key) == history[:5]
        await save(again, key, history)  # the first save after a start: whole
        assert await again.flush(10)
        assert await history_of(again, key) == history
        assert await stored_rows(place, key) == [("worker", 0, len(history))]
    finally:
        await again.close()


# -- databases written before segments ------------------------------------------------------

# PostgreSQL's agent_histories and its unique key before segments (as created then).
_OLD_POSTGRES_DDL = """
    CREATE TABLE IF NOT EXISTS agent_histories (
        id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
        swarm_name TEXT NOT NULL,
        caller_role TEXT NOT NULL,
        caller_id TEXT NOT NULL,
        tool_format TEXT NOT NULL,
        task_id TEXT NOT NULL,
        agent_name TEXT NOT NULL,
        history JSONB NOT NULL,
        created_at TIMESTAMPTZ DEFAULT NOW(),
        updated_at TIMESTAMPTZ DEFAULT NOW()
    );
    CREATE UNIQUE INDEX IF NOT EXISTS mail_agent_histories_key_uidx ON agent_histories
        (swarm_name, caller_role, caller_id, task_id, agent_name);
"""
_OLD_ROW = (
    "INSERT INTO agent_histories (swarm_name, caller_role, caller_id, task_id, agent_name,"
    " tool_format, history) VALUES ({})"
)


async def write_old_database(place: Place, key: InstanceKey, history: list[Any]) -> None:
    kind, where = place
    args = (key.swarm_name, key.caller_role, key.caller_id, "t-1", "worker", "completions")
    args = (*args, json.dumps(history))
    if kind == "sqlite":
        conn = connect(where)
        try:
            write_schema(conn, 4)  # (agent histories before segments)
            conn.execute(_OLD_ROW.format(", ".join("?" * 7)), args)
        finally:
            conn.close()
        return
    conn = await asyncpg.connect(where, timeout=10)
    try:
        await conn.execute(_OLD_POSTGRES_DDL)
        await conn.execute(_OLD_ROW.format("$1, $2, $3, $4, $5, $6, $7::jsonb"), *args)
    finally:
        await conn.close()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def test_a_database_written_before_segments_is_upgraded_in_place(place: Place) -> None:
    key = new_key()
    history: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for n in range(5):
        turn(history, n)
    await write_old_database(place, key, history)
    store = open_store(place)
    # Read off the store's logger itself: an earlier test of the run may have stopped `mail`
    # records short of pytest's handler (server logging set up in process, or a library's
    # logging config that disabled the loggers existing then).
    records = _Records()
    store_logger = logging.getLogger("mail.store")
    level = store_logger.level
    store_logger.addHandler(records)
    store_logger.setLevel(logging.INFO)
    for name in ("mail.store", "mail.store.sqlite", "mail.store.postgres"):
        logging.getLogger(name).disabled = False
    try:
        await store.start()
    finally:
        store_logger.removeHandler(records)
        store_logger.setLevel(level)
    try:
        upgraded = [m for m in records.messages if "upgraded" in m]
        assert len(upgraded) == 1 and "segments" in upgraded[0]
        assert await history_of(store, key) == history
        assert await stored_rows(place, key) == [("worker", 0, 11)]
        turn(history, 5)  # the first save after a start: whole
        await save(store, key, history)
        assert await store.flush(10)
        turn(history, 6)  # then appended
        await save(store, key, history)
        assert await store.flush(10)
        assert await stored_rows(place, key) == [("worker", 0, 13), ("worker", 13, 2)]
        assert await history_of(store, key) == history
    finally:
        await store.close()


# -- a real server ----------------------------------------------------------------------------


def _server_rows(place: Place, folder: Path, task_id: str) -> list[tuple[str, int, list[Any]]]:
    """(agent, start, messages) of the task's history rows, in order."""
    kind, where = place
    sql = (
        "SELECT agent_name, start, history FROM agent_histories WHERE task_id = {}"
        " ORDER BY agent_name, start"
    )
    if kind == "sqlite":
        (path,) = [p for p in folder.rglob("*.db")]
        conn = sqlite3.connect(path)
        try:
            found = conn.execute(sql.format("?"), (task_id,)).fetchall()
        finally:
            conn.close()
    else:
        found = asyncio.run(fetch_rows(where, sql.format("$1"), task_id))
    return [(r[0], r[1], json.loads(r[2])) for r in found]


def _joined(rows: list[tuple[str, int, list[Any]]]) -> dict[str, list[Any]]:
    histories: dict[str, list[Any]] = {}
    for agent, start, messages in rows:
        history = histories.setdefault(agent, [])
        assert start == len(history), (agent, start, len(history))  # no gap, no overlap
        history.extend(messages)
    return histories


def test_a_long_task_on_a_server_keeps_its_histories_across_a_restart(
    place: Place, tmp_path: Path
) -> None:
    """A chatty task (stub agents, every turn 10 ms: a batch each) is stored as many segments;
    after a restart the task goes on from its stored histories and adds to them."""
    kind, where = place
    (tmp_path / "swarms.json").write_text(json.dumps(stub_swarms_json()), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "chatty")
    env = {"MAIL_STUB_LATENCY_MS": "10"}
    if kind == "postgres":
        env["DATABASE_URL"] = where
    extra = f'task_message_limit = 0\ntask_turn_limit = 0\n\n[server.store]\nkind = "{kind}"\n'

    def make(port: int) -> ServerProcess:
        config = write_config(tmp_path, port=port, swarm="stub", extra=extra)
        return ServerProcess(tmp_path, port, args=["--config", str(config)], env=env)

    def chat(body: str, task_id: str | None = None) -> str:
        server = start_on_a_free_port(make)
        try:
            answer = httpx.post(
                f"{server.base_url}/message",
                json={"body": body, **({"task_id": task_id} if task_id else {})},
                headers=auth(key),
                timeout=120,
            )
            assert answer.status_code == 200, answer.text
            found = answer.json()["task_id"] if task_id is None else task_id
        finally:
            assert server.stop() == 0, server.logs()
        return str(found)

    task_id = chat("CHATTY 30 300")
    rows = _server_rows(place, tmp_path, task_id)
    before = _joined(rows)
    assert set(before) == {"supervisor", "worker"}
    assert len(rows) > 20  # turns stored as segments, not one row each history
    worker_text = json.dumps(before["worker"])
    lefts = [int(n) for n in re.findall(r"CHATTY 30 300 left (\d+)", worker_text)]
    # each request twice (its message and the call that sent it), in order, none lost
    assert lefts == [n for n in range(30, 0, -1) for _ in (0, 1)], lefts

    chat("CHATTY 5 300", task_id)  # a restart: the task goes on where it was
    after = _joined(_server_rows(place, tmp_path, task_id))
    for agent, history in before.items():
        assert after[agent][: len(history)] == history
        assert len(after[agent]) > len(history)
    assert "CHATTY 5 300 left 1" in json.dumps(after["worker"][len(before["worker"]) :])
