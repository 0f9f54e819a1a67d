"""End-to-end: after POST /swarms/load, GET / describes the loaded swarm, not the startup one."""

from __future__ import annotations

import json

import httpx
import pytest

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(120)


def test_root_reports_the_swarm_loaded_by_post_swarms_load(tmp_path) -> None:
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port)
    keys_file = tmp_path / "registries" / "keys.json"
    admin = create_key(keys_file, "admin", "root")
    user = create_key(keys_file, "user", "dora")
    with_key = {"timeout": 30}
    server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
    server.wait_healthy(timeout=120)  # generous: CI machines may be busy
    try:
        before = httpx.get(server.base_url + "/", **with_key).json()["swarm"]
        assert before["name"] == "stub" and before["description"] == "stub swarm for server tests"
        assert httpx.get(server.base_url + "/health", **with_key).json()["swarm_name"] == "stub"
        swarm = json.loads((tmp_path / "swarms.json").read_text())[0]
        swarm.update(
            name="replacement",
            version="2.0.0",
            description="",
            keywords=["new"],
            entrypoint="supervisor",
        )
        swarm["agents"].append(
            {
                "name": "greeter",
                "factory": "python::tests.support.stub_agents:stub_factory",
                "comm_targets": ["supervisor"],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "agent_params": {},
            }
        )
        swarm["entrypoint"] = "greeter"
        r = httpx.post(
            server.base_url + "/swarms/load",
            headers=auth(admin),
            json={"json": json.dumps(swarm)},
            **with_key,
        )
        assert r.status_code == 200, r.text
        after = httpx.get(server.base_url + "/", **with_key).json()["swarm"]
        # The loaded swarm's own values; an empty description is not replaced by the old one.
        assert after == {
            "name": "replacement",
            "version": "2.0.0",
            "description": "",
            "entrypoint": "greeter",
            "keywords": ["new"],
            "public": False,
        }
        # /health names the same swarm as GET / (it kept the old name before).
        health = httpx.get(server.base_url + "/health", **with_key).json()
        assert health["swarm_name"] == "replacement" and health["status"] == "healthy"
        # So do /swarm (the console's description, with the loaded agents) and /status.
        described = httpx.get(server.base_url + "/swarm", headers=auth(user), **with_key).json()
        assert described["name"] == "replacement"
        assert "greeter" in [agent["name"] for agent in described["agents"]]
        status = httpx.get(server.base_url + "/status", headers=auth(user), **with_key).json()
        assert status["swarm"]["name"] == "replacement"
        # And the loaded swarm is what new callers talk to.
        r = httpx.post(
            server.base_url + "/message", headers=auth(user), json={"body": "hi"}, **with_key
        )
        assert r.status_code == 200 and r.json()["response"] == "echo[dora]: hi"
    finally:
        assert server.stop() == 0, server.logs()[-3000:]
