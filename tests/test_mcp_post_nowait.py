"""MCP ``post_message(wait=false)`` says "started" only for a task that started and is stored.

It answered ``{"status": "started"}`` at once and ran the message in a task nobody awaited:
a message the server refused (the caller's storage quota, a task still running, an unknown
task) was told "started" and silently lost; and a task said to have started was not stored
yet, so a kill -9 right after the answer left no such task (404 after the restart). Now the
checks run, and the submission is committed, before the answer. Real ``mail server`` (stub
swarm, SQLite, the default store), the ``mcp`` SDK's client.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.kill_restart import tasks_gone_after_kill

from mcp_face_support import ToolFailed, mcp_agent
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

TRIES = 4


async def post_nowait(server: ServerProcess, who: str, **args: Any) -> Any:
    """post_message(wait=false)'s answer, or its error text (a ToolFailed raised out of the
    session's task group would come wrapped in an exception group)."""
    async with mcp_agent(server.base_url, server.keys[who]) as agent:
        try:
            return await agent.call("post_message", wait=False, **args)
        except ToolFailed as exc:
            return str(exc)


def tasks_of(server: ServerProcess, who: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[who]), timeout=30)
    assert answer.status_code == 200, answer.text
    records: dict[str, Any] = answer.json()
    return records


def test_a_refused_message_is_an_error_not_started(tmp_path: Path) -> None:
    store = "[server.store]\nmax_stored_tasks_per_caller = 1\n"
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=store) as server:
        first = asyncio.run(post_nowait(server, "alice", body="SLEEP 3 first"))
        assert first["status"] == "started", first
        # The first task still runs: a message to it is refused (409), as over HTTP.
        running = asyncio.run(post_nowait(server, "alice", body="more", task_id=first["task_id"]))
        assert isinstance(running, str) and "409: " in running, running
        # A new task: the caller's one stored (running) task is its quota.
        over = asyncio.run(post_nowait(server, "alice", body="one too many"))
        assert isinstance(over, str), over
        assert "429: " in over and "max_stored_tasks_per_caller = 1" in over, over
        assert list(tasks_of(server, "alice")) == [first["task_id"]]
        assert asyncio.run(post_nowait(server, "bob", body="bob's"))["status"] == "started"


def test_a_started_task_exists_after_kill_right_after_the_answer(tmp_path: Path) -> None:
    def act(server: ServerProcess) -> str:
        started = asyncio.run(post_nowait(server, "alice", body="SLEEP 5 hello"))
        assert started["status"] == "started", started
        task_id: str = started["task_id"]
        return task_id

    lost = tasks_gone_after_kill(tmp_path, TRIES, act)
    assert not lost, f"{len(lost)} of {TRIES} tasks said started were gone after kill -9: {lost}"
