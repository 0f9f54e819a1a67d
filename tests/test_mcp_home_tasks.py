"""An outside agent's home task that only held team work ends when the agent leaves.

An MCP agent's ``transfer_file`` to the user, or its ``create_thread``, with no task of a
message to go to, runs in a task of its own (its "home task"). No agent message ever entered
such a task, so nothing completed it: it stayed ``running`` for good, after the session had
ended too. Each one counted against the caller's ``max_paused_tasks_per_caller`` (three MCP
sessions, then the caller's ``POST /message`` was refused 429 with a bound of 2), kept the
caller's instance from idle reclaim and its files from retention. Now it is stopped when
the agent leaves. Real ``mail server`` (stub swarm), the ``mcp`` SDK's client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mcp_face_support import mcp_agent
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

SESSIONS = 3


@pytest.fixture
def server(tmp_path: Any) -> Iterator[ServerProcess]:
    with keyed_stub_server(
        tmp_path, ROOT_ALICE_BOB, extra="max_paused_tasks_per_caller = 2\n"
    ) as srv:
        yield srv


async def team_work(server: ServerProcess, n: int, tool: str) -> None:
    async with mcp_agent(server.base_url, server.keys["alice"]) as agent:
        await agent.call("join_swarm", name=f"helper{n}")
        if tool == "transfer_file":
            await agent.call("transfer_file", recipient="user", filename="a.txt", content="hi")
        else:
            await agent.call("create_thread", title="plans", participants=[])


@pytest.mark.parametrize("tool", ["transfer_file", "create_thread"])
def test_home_tasks_of_team_work_end_when_the_agent_leaves(
    server: ServerProcess, tool: str
) -> None:
    for n in range(SESSIONS):
        asyncio.run(team_work(server, n, tool))
    headers = auth(server.keys["alice"])
    tasks = httpx.get(f"{server.base_url}/tasks", headers=headers).json()
    assert len(tasks) == SESSIONS
    assert not any(t["is_running"] for t in tasks.values()), tasks
    answer = httpx.post(
        f"{server.base_url}/message",
        json={"body": "hello", "subject": "s"},
        headers=headers,
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
