"""What outside agents joined over MCP make of team data (attachments, threads) is kept in the
server's database, whatever the swarm's own agents use.

On a swarm whose agents use no team tools (the stub swarm here; the repository's demo swarm
too), the server kept team data in memory even with the default SQLite store or PostgreSQL:
only a swarm with an agent that opted into ``team_tools`` had the database's team tables. An
MCP agent's ``transfer_file`` (told ``sent``, with the attachment's id) and ``create_thread``
were gone after a restart, clean or kill -9 (``GET /attachments/{id}`` 404, ``GET /threads``
empty), against docs/team-tools.md ("a kill -9 loses nothing an agent was told had
happened"). Real ``mail server``, the ``mcp`` SDK's client.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.support.kill_restart import KilledServers
from tests.support.store_backends import DurableStore, scratch_store_fixture

from mcp_face_support import mcp_agent
from server_fixtures import ServerProcess

pytestmark = pytest.mark.timeout(300)

durable_store = scratch_store_fixture("mail_mcp_team")


async def make_team_data(server: ServerProcess) -> tuple[dict[str, Any], dict[str, Any]]:
    base, key = server.base_url, server.keys["alice"]
    async with mcp_agent(base, key) as helper, mcp_agent(base, key) as other:
        await helper.call("join_swarm", name="helper")
        await other.call("join_swarm", name="other")
        sent = await helper.call(
            "transfer_file", recipient="user", filename="notes.txt", content="kept bytes"
        )
        thread = await helper.call(
            "create_thread", title="plans", participants=["other"], initial_message="hello"
        )
        return sent, thread


def test_outside_agents_team_data_survives_kill(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    with KilledServers(tmp_path, env=durable_store.env) as servers:
        sent, thread = asyncio.run(make_team_data(servers.server))
        servers.kill_and_restart()  # right after the answers
        found = servers.get(f"/attachments/{sent['id']}")
        assert found.status_code == 200, found.text
        assert found.content == b"kept bytes"
        threads = servers.get("/threads")
        assert threads.status_code == 200, threads.text
        assert "plans" in threads.text, (thread, threads.text)
