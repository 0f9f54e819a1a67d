"""End-to-end: `mail server` with DATABASE_URL keeps task records across a restart."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx
import pytest

from server_fixtures import (
    auth,
    create_key,
    free_port,
    run_cli,
    running_server,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(120)

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def test_tasks_survive_a_restart_with_a_database(tmp_path: Path) -> None:
    swarm = f"persist-{uuid.uuid4().hex[:8]}"  # its own rows in the shared test database
    write_stub_swarms(tmp_path, name=swarm)
    config = write_config(tmp_path, port=0, swarm=swarm)
    key = create_key(tmp_path / "registries" / "keys.json", "user", "pat")
    env = {"DATABASE_URL": DATABASE_URL}
    with running_server(tmp_path, ["-c", str(config)], env=env) as server:
        first = httpx.post(
            f"{server.base_url}/message", json={"body": "COUNT"}, headers=auth(key), timeout=30
        ).json()
        assert first["response"] == "turn 1"
    with running_server(tmp_path, ["-c", str(config)], env=env) as server:
        tasks = httpx.get(f"{server.base_url}/tasks", headers=auth(key)).json()
        assert tasks[first["task_id"]]["completed"] is True
        record = httpx.get(
            f"{server.base_url}/task", params={"task_id": first["task_id"]}, headers=auth(key)
        ).json()
        assert any(e["event"] == "task_complete_call" for e in record["events"])
        # The agent history came back too: the conversation continues where it stopped.
        again = httpx.post(
            f"{server.base_url}/message",
            json={"body": "COUNT", "task_id": first["task_id"], "resume_from": "user_response"},
            headers=auth(key),
            timeout=30,
        ).json()
        assert again["response"] == "turn 2"


def test_unreachable_database_is_a_one_line_startup_error(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    config = write_config(tmp_path, port=free_port())
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nope"
    code, _, err = run_cli("server", "-c", str(config), env={"DATABASE_URL": url})
    assert code == 2
    assert err.startswith("mail server: error: cannot start persistence (DATABASE_URL):")
    assert err.count("\n") == 1
