"""The MCP face on the stub swarm (no model) and the demo swarm: a task driven to a
breakpoint and answered over MCP, an agent key bound to one identity, the per-instance
limit on outside agents, capped waits, and the offline demo script (docs/mcp.md)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_face_support import ToolFailed, mcp_agent
from server_fixtures import (
    REPO_ROOT,
    create_key,
    keyed_stub_server,
    running_server,
    server_env,
)

pytestmark = pytest.mark.timeout(180)

KEYS = {"alice": ("user", "alice"), "scout": ("agent", "scout")}
LIMITS = """
[server.mcp]
max_agents_per_instance = 2
max_wait_seconds = 0.5
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with keyed_stub_server(tmp_path_factory.mktemp("mcp-stub"), KEYS, extra=LIMITS) as srv:
        yield srv


def test_task_to_a_breakpoint_answered_over_mcp(server: Any) -> None:
    async def main() -> None:
        async with mcp_agent(server.base_url, server.keys["alice"]) as user:
            paused = await user.call("post_message", body="BREAKPOINT ship it?")
            assert "human_review" in paused["response"]
            task = await user.call("get_task", task_id=paused["task_id"])
            assert any(e["event"] == "breakpoint_tool_call" for e in task["events"])
            done = await user.call("answer_breakpoint", task_id=paused["task_id"], result="yes")
            assert done["response"] == "reviewed: yes"
            assert done["task_id"] == paused["task_id"]

    asyncio.run(main())


def test_agent_key_binds_identity_and_cannot_act_as_user(server: Any) -> None:
    async def main() -> None:
        async with mcp_agent(server.base_url, server.keys["scout"]) as scout:
            with pytest.raises(ToolFailed, match="belongs to agent 'scout'"):
                await scout.call("join_swarm", name="someone-else")
            joined = await scout.call("join_swarm")
            assert joined["joined_as"] == "scout"
            with pytest.raises(ToolFailed, match="403"):
                await scout.call("post_message", body="hello")

    asyncio.run(main())


def test_outside_agents_per_instance_limit_and_wait_cap(server: Any) -> None:
    async def main() -> None:
        base, key = server.base_url, server.keys["alice"]
        async with mcp_agent(base, key) as one, mcp_agent(base, key) as two:
            with pytest.raises(ToolFailed, match="max_description_chars"):
                await one.call("join_swarm", name="one", description="x" * 2001)
            await one.call("join_swarm", name="one")
            await two.call("join_swarm", name="two")
            async with mcp_agent(base, key) as three:
                with pytest.raises(ToolFailed, match="max_agents_per_instance"):
                    await three.call("join_swarm", name="three")
                await one.call("leave_swarm")
                await three.call("join_swarm", name="three")  # room again
            # A long-poll asking for 60 s is cut to [server.mcp] max_wait_seconds.
            started = time.monotonic()
            got = await two.call("wait_for_messages", timeout_seconds=60)
            assert got["timed_out"] is True
            assert time.monotonic() - started < 10

    asyncio.run(main())


def test_offline_demo_script_finishes_a_task_with_the_demo_swarm(tmp_path: Path) -> None:
    """scripts/mcp_demo_agent.py against the repository's demo swarm (as in docs/mcp.md)."""
    shutil.copy(REPO_ROOT / "swarms.json", tmp_path / "swarms.json")
    key = create_key(tmp_path / "keys.json", "user", "demo-user")
    args = ["--swarm-source", "swarms.json", "--swarm-name", "demo"]
    env = {"MAIL_KEYS_FILE": str(tmp_path / "keys.json")}
    with running_server(tmp_path, args, env=env) as srv:
        script = REPO_ROOT / "scripts" / "mcp_demo_agent.py"
        done = subprocess.run(
            [sys.executable, str(script), srv.base_url, key],
            capture_output=True,
            text=True,
            timeout=120,
            env=server_env(),
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "joined as factchecker next to supervisor, weather, math"
    assert lines[1] == "supervisor asks: Ask the factchecker: is the launch on Monday?"
    assert '"response": "Checked: the launch is on Monday, 9:00."' in lines[2]
