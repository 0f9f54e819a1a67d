"""Usage and the budget pause survive a restart of a server persisting to PostgreSQL: both
live in what every store already keeps (the task's events and its state)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.pg_schema import scratch_schema, with_search_path

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[1]
BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_telemetry", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


def test_usage_and_budget_pause_survive_a_restart(tmp_path: Path, pg_url: str) -> None:
    shutil.copy(REPO / "swarms.json", tmp_path / "swarms.json")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    config = write_config(tmp_path, port=port, swarm="demo")

    def server() -> ServerProcess:
        return ServerProcess(
            tmp_path, port, args=["--config", str(config)], env={"DATABASE_URL": pg_url}
        ).start()

    task_id = str(uuid.uuid4())
    first = server()
    try:
        r = httpx.post(
            f"{first.base_url}/message",
            json={
                "body": "What is 6 times 7?",
                "task_id": task_id,
                "kwargs": {"max_tokens_total": 1},
            },
            headers=auth(key),
            timeout=60,
        )
        assert r.status_code == 200 and "max_tokens_total" in r.json()["response"], r.text
        before = httpx.get(
            f"{first.base_url}/task", params={"task_id": task_id}, headers=auth(key)
        ).json()
        assert before["usage"]["total_tokens"] > 0
    finally:
        assert first.stop() == 0, first.logs()

    second = server()
    try:
        after = httpx.get(
            f"{second.base_url}/task", params={"task_id": task_id}, headers=auth(key)
        ).json()
        assert after["state"] == "waiting_for_budget"
        assert after["usage"] == before["usage"]
        refused = httpx.post(
            f"{second.base_url}/message",
            json={"body": "go on", "task_id": task_id, "resume_from": "user_response"},
            headers=auth(key),
        )
        assert refused.status_code == 409, refused.text
        r = httpx.post(
            f"{second.base_url}/message",
            json={
                "body": "go on",
                "task_id": task_id,
                "resume_from": "user_response",
                "kwargs": {"max_tokens_total": 1_000_000},
            },
            headers=auth(key),
            timeout=60,
        )
        assert r.status_code == 200, r.text
        done = httpx.get(
            f"{second.base_url}/task", params={"task_id": task_id}, headers=auth(key)
        ).json()
        assert done["state"] == "completed"
        assert done["usage"]["total_tokens"] > before["usage"]["total_tokens"]
    finally:
        assert second.stop() == 0, second.logs()
