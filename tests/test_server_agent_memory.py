"""With DATABASE_URL set, every instance's agent memory lives in PostgreSQL (seed 000)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mail.api import MAILSwarmTemplate
from mail.config import ServerConfig
from mail.server.app_factory import create_app
from server_fixtures import stub_swarms_json

pytestmark = pytest.mark.timeout(60)

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _config(tmp_path: Path) -> ServerConfig:
    return ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": 8124,
            "swarm": {"name": "stub", "registry": str(tmp_path / "registries" / "stub.json")},
            "settings": {"instance_idle_timeout": 0},
            "auth": {"mode": "local", "keys_file": str(tmp_path / "keys.json")},
        }
    )


async def test_instances_share_a_postgres_backed_agent_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", DATABASE_URL)
    template = MAILSwarmTemplate.from_swarms_json(stub_swarms_json()[0])
    app = create_app(_config(tmp_path), template=template)
    agent = f"worker_{uuid.uuid4().hex[:8]}"
    async with app.router.lifespan_context(app):
        state = app.state.mail
        alice = await state.instances.get("user", "alice", "key-a")
        bob = await state.instances.get("user", "bob", "key-b")
        memory = alice.swarm.runtime.memory
        assert memory is bob.swarm.runtime.memory
        # Opened on first use, not at start-up (store/agent_memory_lazy.py).
        assert memory.store is None
        await memory.put(agent, "k1", {"role": "user", "content": "the harvest festival is friday"})
        assert type(memory.store).__name__ == "PostgresMemoryStore"
        found = await bob.swarm.runtime.memory.search(agent, "harvest festival")
        assert [f["value"]["content"] for f in found] == ["the harvest festival is friday"]


# A server whose agents never remember must not pay for LangGraph at start-up: it imports
# langgraph/langchain_core (over a second on a busy machine) and opens a second pool.
_NO_MEMORY_PROBE = """
import asyncio, sys
from mail.api import MAILSwarmTemplate
from mail.config import ServerConfig
from mail.server.app_factory import create_app
from server_fixtures import stub_swarms_json

config = ServerConfig.model_validate_json(sys.argv[1])

async def main():
    app = create_app(config, template=MAILSwarmTemplate.from_swarms_json(stub_swarms_json()[0]))
    async with app.router.lifespan_context(app):
        state = app.state.mail
        inst = await state.instances.get("user", "nomemory", "key-n")
        assert state.store.backend == "postgres", state.store.backend
        assert not inst.swarm.runtime.memory.opened
        heavy = [m for m in ("langgraph", "langchain_core", "langmem") if m in sys.modules]
        assert not heavy, heavy
        # First use opens it (and imports LangGraph) then.
        await inst.swarm.runtime.memory.put("supervisor", "k", {"content": "late"})
        assert "langgraph" in sys.modules
    print("ok")

asyncio.run(main())
"""


def test_agent_memory_is_not_loaded_until_an_agent_uses_it(tmp_path: Path) -> None:
    from server_fixtures import REPO_ROOT, server_env

    env = server_env({"DATABASE_URL": DATABASE_URL})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "tests"), env["PYTHONPATH"]])
    result = subprocess.run(
        [sys.executable, "-c", _NO_MEMORY_PROBE, _config(tmp_path).model_dump_json()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")
