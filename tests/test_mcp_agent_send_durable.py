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

import httpx
import pytest

from mcp_face_support import mcp_agent
from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

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
    write_stub_swarms(tmp_path)
    keys = {"alice": create_key(tmp_path / "registries" / "keys.json", "user", "alice")}

    def start() -> ServerProcess:
        port = free_port()
        config = write_config(tmp_path, port=port)
        server = ServerProcess(tmp_path, port, args=["--config", str(config)])
        server.keys = keys
        return server.start()

    server = start()
    lost: list[str] = []
    try:
        for _ in range(TRIES):
            sent = asyncio.run(send(server, tool, **args))
            assert sent["result"].startswith(("message sent", "broadcast delivered")), sent
            assert server.proc is not None
            server.proc.kill()  # kill -9 right after the answer: no shutdown hook runs
            server.proc.wait(10)
            server = start()
            found = httpx.get(
                f"{server.base_url}/task",
                params={"task_id": sent["task_id"]},
                headers=auth(keys["alice"]),
                timeout=60,
            )
            if found.status_code != 200:
                lost.append(f"{found.status_code} {sent['task_id']}")
    finally:
        server.stop()
    assert not lost, f"{len(lost)} of {TRIES} tasks of sent messages were gone: {lost}"
