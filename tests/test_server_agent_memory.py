"""With DATABASE_URL set, every instance's agent memory lives in PostgreSQL (seed 000)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from mail.api import MAILSwarmTemplate
from mail.config import ServerConfig
from mail.server.app import create_app
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
        assert type(memory.store).__name__ == "PostgresMemoryStore"
        await memory.put(agent, "k1", {"role": "user", "content": "the harvest festival is friday"})
        found = await bob.swarm.runtime.memory.search(agent, "harvest festival")
        assert [f["value"]["content"] for f in found] == ["the harvest festival is friday"]
