"""Persistence end to end: a real `mail server` with DATABASE_URL on the real PostgreSQL.

kill -9 while a task is paused at a breakpoint, start again, resume it, and the task
completes with its earlier history intact; /tasks lists it after the restart; the rows are
in the documented tables.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest
from tests.support.pg_schema import postgres_answers, reachable_database
from tests.support.stub_agents import stub_swarms_json

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(180)

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _database_reachable() -> bool:
    return postgres_answers(DATABASE_URL)


@pytest.fixture(scope="module")
def database() -> str:
    return reachable_database(DATABASE_URL)


def _fetch(sql: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(DATABASE_URL)
        try:
            return await conn.fetch(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def _server(directory: Path, swarm: str, port: int) -> ServerProcess:
    config = write_config(directory, port=port, swarm=swarm)
    return ServerProcess(
        directory, port, args=["--config", str(config)], env={"DATABASE_URL": DATABASE_URL}
    )


def test_kill_at_breakpoint_restart_and_resume(database: str, tmp_path: Path) -> None:
    swarm = f"persist-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(stub_swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    task_id = str(uuid.uuid4())

    first = _server(tmp_path, swarm, port).start()
    try:
        r = httpx.post(
            f"{first.base_url}/message",
            json={"body": "BREAKPOINT please review", "task_id": task_id},
            headers=auth(key),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        paused = json.loads(r.json()["response"])
        assert paused[0]["name"] == "human_review"
        assert json.loads(paused[0]["arguments"]) == {"question": "BREAKPOINT please review"}
    finally:
        assert first.proc is not None
        first.proc.kill()  # kill -9: no shutdown hooks run
        first.proc.wait(10)

    second = _server(tmp_path, swarm, port).start()
    try:
        tasks = httpx.get(f"{second.base_url}/tasks", headers=auth(key), timeout=10).json()
        assert task_id in tasks
        assert tasks[task_id]["task_owner"] == f"user:alice@{swarm}"
        record = httpx.get(
            f"{second.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
        ).json()
        assert any(e["event"] == "breakpoint_tool_call" for e in record["events"])

        r = httpx.post(
            f"{second.base_url}/message",
            json={
                "body": "",
                "task_id": task_id,
                "resume_from": "breakpoint_tool_call",
                "kwargs": {"breakpoint_tool_call_result": "approved after restart"},
            },
            headers=auth(key),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.json()["response"] == "reviewed: approved after restart"

        task = httpx.get(
            f"{second.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
        ).json()
        names = [e["event"] for e in task["events"]]
        # Events from before the crash are still there, followed by the resumed ones.
        assert names.index("breakpoint_tool_call") < names.index("breakpoint_action_complete")
        assert task["completed"] is True
    finally:
        assert second.stop() == 0, second.logs()

    rows = _fetch(
        "SELECT agent_name, history FROM agent_histories WHERE swarm_name = $1 AND task_id = $2"
        " ORDER BY start",
        swarm,
        task_id,
    )
    assert {r["agent_name"] for r in rows} == {"supervisor"}
    history = []  # its segments, in order (docs/database.md)
    for row in rows:
        segment = row["history"]
        history.extend(json.loads(segment) if isinstance(segment, str) else segment)
    text = json.dumps(history)
    # The pre-crash user message, the breakpoint result and the final call are all there.
    assert "BREAKPOINT please review" in text
    assert "approved after restart" in text
    assert "task_complete" in text
    responses = _fetch(
        "SELECT response FROM task_responses WHERE swarm_name = $1 AND task_id = $2",
        swarm,
        task_id,
    )
    assert len(responses) == 1
    done = _fetch(
        "SELECT completed, is_running FROM tasks WHERE swarm_name = $1 AND task_id = $2",
        swarm,
        task_id,
    )
    assert done[0]["completed"] is True
    events = _fetch(
        "SELECT event_type FROM task_events WHERE swarm_name = $1 AND task_id = $2",
        swarm,
        task_id,
    )
    assert "breakpoint_tool_call" in {e["event_type"] for e in events}
