"""Acknowledged means stored, for an MCP outside agent's sends: the task a ``send_request``
(or ``send_broadcast``) answered ``message sent`` for exists after a kill -9 right after.

The message went into the runtime's mailbox and the task was made only when the runtime
took it from there, committed some milliseconds later: killed (SIGKILL) right after the
answer, the task was gone after the restart (404, 4 of 4 on SQLite) though the agent was
told its message was sent and given the task id. Real ``mail server`` (stub swarm, SQLite,
the default store), the ``mcp`` SDK's client.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.support.kill_restart import tasks_gone_after_kill

from mcp_face_support import mcp_agent
from server_fixtures import ServerProcess

pytestmark = pytest.mark.timeout(300)

TRIES = 3


async def send(server: ServerProcess, tool: str, **args: Any) -> Any:
    async with mcp_agent(server.base_url, server.keys["alice"]) as agent:
        await agent.call("join_swarm", name="helper")
        return await agent.call(tool, subject="s", body="hello", **args)


@pytest.mark.parametrize(
    ("tool", "args"), [("send_request", {"target": "supervisor"}), ("send_broadcast", {})]
)
def test_a_sent_message_s_task_exists_after_kill_right_after_the_answer(
    tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    def act(server: ServerProcess) -> str:
        sent = asyncio.run(send(server, tool, **args))
        assert sent["result"].startswith(("message sent", "broadcast delivered")), sent
        task_id: str = sent["task_id"]
        return task_id

    lost = tasks_gone_after_kill(tmp_path, TRIES, act)
    assert not lost, f"{len(lost)} of {TRIES} tasks of sent messages were gone: {lost}"
