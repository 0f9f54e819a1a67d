"""Two real `mail server` processes (swarm-alpha, swarm-beta) federated over loopback."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.support.interswarm_agents import swarm_json

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(180)


def _setup_side(directory: Path, name: str, remote: str) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "swarms.json").write_text(json.dumps(swarm_json(name, remote)), encoding="utf-8")
    port = free_port()
    config = write_config(
        directory,
        port=port,
        swarm=name,
        extra="interswarm_timeout = 3.0\n",
    )
    return config, directory / "registries" / "keys.json"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("federation")
    a_dir, b_dir = root / "alpha", root / "beta"
    a_cfg, a_keys = _setup_side(a_dir, "swarm-alpha", "swarm-beta")
    b_cfg, b_keys = _setup_side(b_dir, "swarm-beta", "swarm-alpha")
    keys = {
        "alpha_admin": create_key(a_keys, "admin", "alpha-admin"),
        "alice": create_key(a_keys, "user", "alice"),
        "beta_on_alpha": create_key(a_keys, "agent", "swarm-beta"),
        "beta_admin": create_key(b_keys, "admin", "beta-admin"),
        "bob": create_key(b_keys, "user", "bob"),
        "alpha_on_beta": create_key(b_keys, "agent", "swarm-alpha"),
    }
    a_port = int(a_cfg.read_text().split("port = ")[1].split()[0])
    b_port = int(b_cfg.read_text().split("port = ")[1].split()[0])
    alpha = ServerProcess(
        a_dir,
        a_port,
        args=["--config", str(a_cfg)],
        env={"SWARM_AUTH_TOKEN_SWARM_BETA": keys["alpha_on_beta"]},
    ).start()
    beta = ServerProcess(
        b_dir,
        b_port,
        args=["--config", str(b_cfg)],
        env={"SWARM_AUTH_TOKEN_SWARM_ALPHA": keys["beta_on_alpha"]},
    ).start()
    for server, admin, other, other_name in (
        (alpha, "alpha_admin", beta, "swarm-beta"),
        (beta, "beta_admin", alpha, "swarm-alpha"),
    ):
        r = httpx.post(
            f"{server.base_url}/swarms",
            json={"name": other_name, "base_url": other.base_url, "volatile": False},
            headers=auth(keys[admin]),
            timeout=20,
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "registered", "swarm_name": other_name}
    yield alpha, beta, keys
    alpha.stop()
    beta.stop()


def test_cross_swarm_task_completes_with_remote_answer(pair) -> None:
    alpha, beta, keys = pair
    task_id = str(uuid.uuid4())
    r = httpx.post(
        f"{alpha.base_url}/message",
        json={"body": "ping from alice", "task_id": task_id},
        headers=auth(keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["response"] == "alpha got: beta says: ping from alice"

    tasks = httpx.get(f"{alpha.base_url}/tasks", headers=auth(keys["alice"]), timeout=10).json()
    record = tasks[task_id]
    assert record["task_owner"] == "user:alice@swarm-alpha"
    assert "user:alice@swarm-alpha" in record["task_contributors"]
    assert "swarm-beta" in record["remote_swarms"]
    assert record["completed"] is True

    # Beta's admin sees the remote swarm's share of the task, owned by alpha's user, and the
    # owner's completion notice has finished it there too.
    deadline = time.monotonic() + 10
    while True:
        beta_tasks = httpx.get(
            f"{beta.base_url}/tasks", headers=auth(keys["beta_admin"]), timeout=10
        ).json()
        remote = beta_tasks.get(task_id)
        if remote and remote["completed"]:
            break
        assert time.monotonic() < deadline, beta_tasks
        time.sleep(0.1)
    assert remote["task_owner"] == "user:alice@swarm-alpha"
    assert "swarm:swarm-alpha@swarm-beta" in remote["task_contributors"]


def test_interswarm_message_route_reaches_remote_entrypoint(pair) -> None:
    alpha, _beta, keys = pair
    r = httpx.post(
        f"{alpha.base_url}/interswarm/message",
        json={"targets": ["supervisor@swarm-beta"], "body": "direct hello", "msg_type": "request"},
        headers=auth(keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["response"]["message"]["body"] == "beta completes: direct hello"
    assert data["events"] is None


def test_interswarm_message_validation(pair) -> None:
    alpha, _beta, keys = pair
    url = f"{alpha.base_url}/interswarm/message"
    h = auth(keys["alice"])
    r = httpx.post(url, json={"body": "x"}, headers=h, timeout=10)
    assert r.status_code == 400 and "'targets' and 'body' are required" in r.text
    r = httpx.post(url, json={"targets": ["a@x", "b@x"], "body": "x"}, headers=h, timeout=10)
    assert r.status_code == 400 and "exactly one target" in r.text
    r = httpx.post(
        url, json={"targets": ["a@x"], "body": "x", "msg_type": "interrupt"}, headers=h, timeout=10
    )
    assert r.status_code == 400 and "not supported" in r.text


def test_unknown_swarm_reports_error_to_agent_quickly(pair, tmp_path: Path) -> None:
    alpha, _beta, keys = pair
    # Register a swarm that is not running: the agent must hear about it, the task must end.
    dead_port = free_port()
    r = httpx.post(
        f"{alpha.base_url}/swarms",
        json={"name": "swarm-gone", "base_url": f"http://127.0.0.1:{dead_port}", "volatile": True},
        headers=auth(keys["alpha_admin"]),
        timeout=20,
    )
    # Registration itself fails: the remote cannot be reached for its metadata.
    assert r.status_code >= 400


def test_role_enforcement_on_interswarm_routes(pair) -> None:
    alpha, _beta, keys = pair
    envelope = {"message": {}}
    for path in ("/interswarm/forward", "/interswarm/back"):
        r = httpx.post(f"{alpha.base_url}{path}", json=envelope, headers=auth(keys["alice"]))
        assert r.status_code == 403
        r = httpx.post(f"{alpha.base_url}{path}", json=envelope)
        assert r.status_code == 401
        r = httpx.post(f"{alpha.base_url}{path}", json={}, headers=auth(keys["beta_on_alpha"]))
        assert r.status_code == 400 and "parameter 'message' is required" in r.text
        r = httpx.post(
            f"{alpha.base_url}{path}",
            json={"message": {"message_id": "x"}},
            headers=auth(keys["beta_on_alpha"]),
        )
        assert r.status_code == 400
    r = httpx.post(
        f"{alpha.base_url}/interswarm/message",
        json={"targets": ["supervisor@swarm-beta"], "body": "x"},
        headers=auth(keys["beta_on_alpha"]),
    )
    assert r.status_code == 403


def test_duplicate_envelope_processed_once(pair) -> None:
    alpha, beta, keys = pair
    task_id = str(uuid.uuid4())
    envelope = {
        "message_id": str(uuid.uuid4()),
        "source_swarm": "swarm-alpha",
        "target_swarm": "swarm-beta",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "payload": {
            "task_id": task_id,
            "request_id": str(uuid.uuid4()),
            "sender": {"address_type": "agent", "address": "supervisor@swarm-alpha"},
            "recipient": {"address_type": "agent", "address": "supervisor@swarm-beta"},
            "subject": "dup",
            "body": "only once",
            "sender_swarm": "swarm-alpha",
            "recipient_swarm": "swarm-beta",
            "routing_info": {},
        },
        "msg_type": "request",
        "auth_token": keys["alpha_on_beta"],
        "task_owner": "user:carol@swarm-alpha",
        "task_contributors": ["user:carol@swarm-alpha"],
        "metadata": {},
    }
    for _ in range(2):
        r = httpx.post(
            f"{beta.base_url}/interswarm/forward",
            json={"message": envelope},
            headers=auth(keys["alpha_on_beta"]),
            timeout=10,
        )
        assert r.status_code == 200, r.text
        assert r.json()["task_id"] == task_id
        assert r.json()["local_runner"] == "swarm:swarm-alpha@swarm-beta"
    time.sleep(0.5)
    tasks = httpx.get(f"{beta.base_url}/tasks", headers=auth(keys["beta_admin"]), timeout=10).json()
    assert task_id in tasks and "events" not in tasks[task_id]  # summaries; logs on /task
    record = httpx.get(
        f"{beta.base_url}/task",
        params={"task_id": task_id},
        headers=auth(keys["beta_admin"]),
        timeout=10,
    ).json()
    events = record["events"]
    received = [e for e in events if e["event"] == "interswarm_message_received"]
    assert len(received) == 1
