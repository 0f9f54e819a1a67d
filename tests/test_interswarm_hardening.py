"""Issue 12 (items 1-3, 11) against two real federated `mail server` processes.

1. Trust: a peer can only add to tasks it owns or that were forwarded to it; keys bound to a
   swarm speak only for it; a registry entry's caller_id is enforced.
2. A remote agent that repeats a failing call is stopped and the owner's caller gets an answer.
3. A peer that dies while a task waits on it: the waiting agent hears at once; a caller's
   timeout stops the task.
11. POST /interswarm/message validates timeout, routing_info, body and subject.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.interswarm_agents import swarm_json
from tests.support.peer_envelopes import request_envelope

from server_fixtures import ServerProcess, auth, create_key, free_port, run_cli, write_config

pytestmark = pytest.mark.timeout(240)

HEALTH_INTERVAL = 1.0


def _side(directory: Path, name: str, remote: str) -> tuple[Path, Path, int]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "swarms.json").write_text(json.dumps(swarm_json(name, remote)), encoding="utf-8")
    port = free_port()
    config = write_config(
        directory,
        port=port,
        swarm=name,
        extra=f"interswarm_timeout = 5.0\nhealth_check_interval = {HEALTH_INTERVAL}\n",
    )
    return config, directory / "registries" / "keys.json", port


def _bound_key(keys_file: Path, key_id: str, swarm: str) -> str:
    code, out, err = run_cli(
        "keys",
        "--keys-file",
        str(keys_file),
        "create",
        "--role",
        "agent",
        "--id",
        key_id,
        "--swarm",
        swarm,
        "--json",
    )
    assert code == 0, err
    record = json.loads(out)
    assert record["swarm"] == swarm
    return str(record["key"])


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("hardening")
    a_cfg, a_keys, a_port = _side(root / "alpha", "swarm-alpha", "swarm-beta")
    b_cfg, b_keys, b_port = _side(root / "beta", "swarm-beta", "swarm-alpha")
    keys = {
        "alpha_admin": create_key(a_keys, "admin", "alpha-admin"),
        "alice": create_key(a_keys, "user", "alice"),
        "beta_on_alpha": _bound_key(a_keys, "swarm-beta", "swarm-beta"),
        "loose_on_alpha": create_key(a_keys, "agent", "peer-x"),
        "beta_admin": create_key(b_keys, "admin", "beta-admin"),
        "alpha_on_beta": _bound_key(b_keys, "swarm-alpha", "swarm-alpha"),
    }
    alpha = ServerProcess(
        root / "alpha",
        a_port,
        args=["--config", str(a_cfg)],
        env={"SWARM_AUTH_TOKEN_SWARM_BETA": keys["alpha_on_beta"]},
    ).start()
    beta = ServerProcess(
        root / "beta",
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
            json={"name": other_name, "base_url": other.base_url, "volatile": True},
            headers=auth(keys[admin]),
            timeout=20,
        )
        assert r.status_code == 200, r.text
    yield alpha, beta, keys, root
    alpha.stop()
    beta.stop()


def _envelope(
    task_id: str, *, source: str, target: str, owner: str, sender: str, recipient: str
) -> dict[str, Any]:
    return request_envelope(
        task_id,
        source=source,
        target=target,
        owner=owner,
        sender={"address_type": "agent", "address": sender},
        recipient=recipient,
        subject="injected",
        body="do something you were not asked to",
    )


def _task(server: ServerProcess, key: str, task_id: str) -> dict[str, Any]:
    r = httpx.get(
        f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
    )
    assert r.status_code == 200, r.text
    return r.json()


def _post(server: ServerProcess, path: str, key: str, envelope: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}{path}", json={"message": envelope}, headers=auth(key), timeout=20
    )


# ------------------------------------------------------------------------------ item 1


def test_peer_cannot_write_into_a_local_task(fed) -> None:  # noqa: ANN001
    alpha, _beta, keys, _ = fed
    task_id = str(uuid.uuid4())
    r = httpx.post(
        f"{alpha.base_url}/message",
        json={"body": "mine only", "task_id": task_id, "entrypoint": "worker"},
        headers=auth(keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    before = _task(alpha, keys["alice"], task_id)
    assert before["remote_swarms"] == [] and before["completed"] is True

    owner = "user:alice@swarm-alpha"
    for path in ("/interswarm/back", "/interswarm/forward"):
        env = _envelope(
            task_id,
            source="swarm-beta",
            target="swarm-alpha",
            owner=owner,
            sender="supervisor@swarm-beta",
            recipient="supervisor@swarm-alpha",
        )
        r = _post(alpha, path, keys["beta_on_alpha"], env)
        assert r.status_code == 404, (path, r.text)
        assert "not known to this swarm" in r.text
    # Claiming to be the local swarm itself is refused outright.
    env = _envelope(
        task_id,
        source="swarm-alpha",
        target="swarm-alpha",
        owner=owner,
        sender="supervisor@swarm-alpha",
        recipient="supervisor@swarm-alpha",
    )
    r = _post(alpha, "/interswarm/back", keys["loose_on_alpha"], env)
    assert r.status_code == 403 and "this swarm" in r.text

    after = _task(alpha, keys["alice"], task_id)
    assert len(after["events"]) == len(before["events"])
    assert after["completed"] is True and after["is_running"] is False
    assert after["task_contributors"] == before["task_contributors"]


def test_bound_key_speaks_only_for_its_swarm(fed) -> None:  # noqa: ANN001
    alpha, _beta, keys, _ = fed
    env = _envelope(
        str(uuid.uuid4()),
        source="swarm-gamma",
        target="swarm-alpha",
        owner="user:g@swarm-gamma",
        sender="supervisor@swarm-gamma",
        recipient="supervisor",
    )
    r = _post(alpha, "/interswarm/forward", keys["beta_on_alpha"], env)
    assert r.status_code == 403
    assert "acts only for swarm 'swarm-beta'" in r.text


def test_forward_only_starts_tasks_the_source_swarm_owns(fed) -> None:  # noqa: ANN001
    alpha, _beta, keys, _ = fed
    task_id = str(uuid.uuid4())
    env = _envelope(
        task_id,
        source="swarm-gamma",
        target="swarm-alpha",
        owner="user:z@swarm-beta",
        sender="supervisor@swarm-gamma",
        recipient="supervisor",
    )
    r = _post(alpha, "/interswarm/forward", keys["loose_on_alpha"], env)
    assert r.status_code == 403 and "may only start tasks it owns" in r.text
    r = httpx.get(f"{alpha.base_url}/tasks", headers=auth(keys["alpha_admin"]), timeout=10)
    assert task_id not in r.text
    # An unbound agent key keeps working for a task its envelope's swarm owns.
    env = _envelope(
        task_id,
        source="swarm-gamma",
        target="swarm-alpha",
        owner="user:z@swarm-gamma",
        sender="supervisor@swarm-gamma",
        recipient="supervisor",
    )
    r = _post(alpha, "/interswarm/forward", keys["loose_on_alpha"], env)
    assert r.status_code == 200, r.text
    assert r.json()["task_id"] == task_id


def test_federation_works_with_bound_keys(fed) -> None:  # noqa: ANN001
    alpha, _beta, keys, _ = fed
    r = httpx.post(
        f"{alpha.base_url}/message",
        json={"body": "ping", "task_id": str(uuid.uuid4())},
        headers=auth(keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["response"] == "alpha got: beta says: ping"


def test_registry_caller_id_is_enforced(fed) -> None:  # noqa: ANN001
    alpha, beta, keys, _ = fed

    def register(caller_id: str | None) -> None:
        r = httpx.post(
            f"{alpha.base_url}/swarms",
            json={
                "name": "swarm-beta",
                "base_url": beta.base_url,
                "volatile": True,
                "caller_id": caller_id,
            },
            headers=auth(keys["alpha_admin"]),
            timeout=20,
        )
        assert r.status_code == 200, r.text

    def forward() -> httpx.Response:
        env = _envelope(
            str(uuid.uuid4()),
            source="swarm-beta",
            target="swarm-alpha",
            owner="user:q@swarm-beta",
            sender="supervisor@swarm-beta",
            recipient="supervisor",
        )
        return _post(alpha, "/interswarm/forward", keys["beta_on_alpha"], env)

    try:
        register("beta-service-account")
        r = forward()
        assert r.status_code == 403 and "identity its registry entry names" in r.text
        register("swarm-beta")  # the id of the key beta really uses
        assert forward().status_code == 200
    finally:
        register(None)


# ------------------------------------------------------------------------------ papercuts


def test_register_swarm_rejects_own_name_wrong_name_and_queries(fed) -> None:  # noqa: ANN001
    alpha, beta, keys, _ = fed
    cases = [
        ({"name": "swarm-alpha", "base_url": beta.base_url}, "is the name of this swarm"),
        ({"name": "swarm-zeta", "base_url": beta.base_url}, "is swarm 'swarm-beta'"),
        # A path prefix is accepted (test_interswarm_peers.py); a query string is not.
        ({"name": "swarm-beta", "base_url": beta.base_url + "/api?x=1"}, "query string"),
        # Control characters reached the network (a 500 from the failed fetch), and a
        # backslash is read as a host character here but as a slash by browsers and proxies.
        ({"name": "swarm-beta", "base_url": beta.base_url + "/a\u0000b"}, "control character"),
        ({"name": "swarm-beta", "base_url": beta.base_url + "/a\u007fb"}, "control character"),
        ({"name": "swarm-beta", "base_url": "http://127.0.0.1\\x/"}, "backslash"),
    ]
    for body, text in cases:
        r = httpx.post(
            f"{alpha.base_url}/swarms", json=body, headers=auth(keys["alpha_admin"]), timeout=20
        )
        assert r.status_code == 400, (body, r.text)
        assert text in r.text
    listed = httpx.get(f"{alpha.base_url}/swarms", timeout=10).text
    assert "swarm-zeta" not in listed


# ------------------------------------------------------------------------------ item 11


def test_interswarm_message_rejects_malformed_fields(fed) -> None:  # noqa: ANN001
    alpha, _beta, keys, _ = fed
    base = {"targets": ["supervisor@swarm-beta"], "body": "x"}
    cases = [
        ({"timeout": "abc"}, "'timeout'"),
        ({"timeout": [1]}, "'timeout'"),
        ({"timeout": -1}, "'timeout'"),
        ({"routing_info": "x"}, "'routing_info'"),
        ({"routing_info": [1]}, "'routing_info'"),
        ({"body": 42}, "'body'"),
        ({"subject": {"a": 1}}, "'subject'"),
    ]
    for extra, field in cases:
        r = httpx.post(
            f"{alpha.base_url}/interswarm/message",
            json={**base, **extra},
            headers=auth(keys["alice"]),
            timeout=20,
        )
        assert r.status_code == 400, (extra, r.text)
        assert field in r.json()["detail"], (extra, r.text)


# ------------------------------------------------------------------------------ item 2


def test_remote_agent_repeating_a_failing_call_is_stopped(fed) -> None:  # noqa: ANN001
    alpha, beta, keys, _ = fed
    started = time.monotonic()
    r = httpx.post(
        f"{alpha.base_url}/interswarm/message",
        json={"targets": ["looper@swarm-beta"], "body": "spin", "timeout": 120},
        headers=auth(keys["alice"]),
        timeout=150,
    )
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    message = r.json()["response"]["message"]
    assert message["subject"] == "::task_error::"
    assert "same failing call `await_message`" in message["body"]
    assert elapsed < 60, elapsed
    task_id = message["task_id"]
    # Beta's admin sees the share of the task that the swarm-alpha runner holds.
    # (/tasks lists summaries; the events are on /task.)
    got = httpx.get(
        f"{beta.base_url}/task",
        params={"task_id": task_id},
        headers=auth(keys["beta_admin"]),
        timeout=10,
    )
    assert got.status_code == 200, got.text
    record = got.json()
    assert record["completed"] is True and record["is_running"] is False
    calls = [e for e in record["events"] if e["event"] == "tool_call"]
    assert 0 < len(calls) <= 5
    assert _task(alpha, keys["alice"], task_id)["is_running"] is False


# ------------------------------------------------------------------------------ item 3


def test_caller_timeout_stops_the_task(fed) -> None:  # noqa: ANN001
    alpha, _beta, keys, _ = fed
    task_id = str(uuid.uuid4())
    r = httpx.post(
        f"{alpha.base_url}/message",
        json={
            "body": "ASK sleeper@swarm-beta slow one",
            "entrypoint": "relay",
            "task_id": task_id,
            "kwargs": {"timeout": 2},
        },
        headers=auth(keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert "timed out" in r.json()["response"]
    record = _task(alpha, keys["alice"], task_id)
    assert record["is_running"] is False and record["completed"] is True


def test_peer_dying_after_accepting_work_wakes_the_waiting_agent(fed) -> None:  # noqa: ANN001
    alpha, _beta, keys, root = fed
    g_cfg, g_keys, g_port = _side(root / "gamma", "swarm-gamma", "swarm-alpha")
    gamma_admin = create_key(g_keys, "admin", "gamma-admin")
    alpha_on_gamma = _bound_key(g_keys, "swarm-alpha", "swarm-alpha")
    gamma = ServerProcess(root / "gamma", g_port, args=["--config", str(g_cfg)]).start()
    try:
        r = httpx.post(
            f"{alpha.base_url}/swarms",
            json={
                "name": "swarm-gamma",
                "base_url": gamma.base_url,
                "auth_token": alpha_on_gamma,
                "volatile": True,
            },
            headers=auth(keys["alpha_admin"]),
            timeout=20,
        )
        assert r.status_code == 200, r.text
        task_id = str(uuid.uuid4())
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                httpx.post,
                f"{alpha.base_url}/message",
                json={
                    "body": "ASK sleeper@swarm-gamma are you there",
                    "entrypoint": "relay",
                    "task_id": task_id,
                },
                headers=auth(keys["alice"]),
                timeout=120,
            )
            deadline = time.monotonic() + 60
            while True:  # gamma has accepted the work
                tasks = httpx.get(
                    f"{gamma.base_url}/tasks", headers=auth(gamma_admin), timeout=10
                ).json()
                if task_id in tasks:
                    break
                assert time.monotonic() < deadline and not pending.done(), tasks
                time.sleep(0.1)
            assert gamma.proc is not None
            gamma.proc.kill()
            gamma.proc.wait(10)
            killed = time.monotonic()
            r = pending.result(timeout=100)
            waited = time.monotonic() - killed
        assert r.status_code == 200, r.text
        answer = r.json()["response"]
        assert answer.startswith("error: ") and "swarm-gamma" in answer, answer
        assert "unreachable" in answer
        # Health-check interval plus a margin that survives a loaded machine.
        assert waited < HEALTH_INTERVAL + 20, waited
        assert _task(alpha, keys["alice"], task_id)["is_running"] is False
    finally:
        gamma.stop()
