"""Reaching peers as operators deploy them: two real `mail server` processes (swarm-alpha,
swarm-beta) whose entrypoints are both `supervisor`, beta behind a path-prefix reverse proxy
(`http://127.0.0.1:<port>/mail`), restarted between requests, and asked for agents that are
not its entrypoint.

Alpha knows beta through a persistent registry-file entry whose base URL is the proxy's, so
every route alpha uses for beta (GET /health, GET /, /interswarm/*) has to keep the prefix.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.peer_agents import peer_swarm_json
from tests.support.prefix_proxy import PrefixProxy

from mail.client import MAILClient
from mail.stdlib.interswarm import get_swarm_health, get_swarm_registry, ping_swarm
from server_fixtures import ServerProcess, auth, create_key, free_port, run_cli, write_config

pytestmark = pytest.mark.timeout(180)

# Long enough that nothing in these tests can be explained by a periodic health check.
HEALTH_INTERVAL = 600


class Pair:
    def __init__(
        self, alpha: ServerProcess, beta: ServerProcess, proxy: PrefixProxy, keys: dict[str, str]
    ) -> None:
        self.alpha, self.beta, self.proxy, self.keys = alpha, beta, proxy, keys
        # Alpha's first message to beta, sent while only the registry file's entry (the
        # proxy's URL) is known; tests may re-register beta later.
        self.first_answer: httpx.Response | None = None
        self.first_paths: list[str] = []


def _side(directory: Path, name: str, remote: str) -> tuple[Path, int]:
    directory.mkdir(parents=True)
    swarms = peer_swarm_json(name, remote)
    (directory / "swarms.json").write_text(json.dumps(swarms), encoding="utf-8")
    port = free_port()
    extra = f"interswarm_timeout = 5.0\nhealth_check_interval = {HEALTH_INTERVAL}\n"
    return write_config(directory, port=port, swarm=name, extra=extra), port


def _registry_file(path: Path, local: str, remote: str, base_url: str) -> None:
    """A registry file as an operator writes it: one persistent peer behind a proxy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    token_var = "${SWARM_AUTH_TOKEN_" + remote.upper().replace("-", "_") + "}"
    document = {
        "local_swarm_name": local,
        "local_base_url": "http://127.0.0.1",
        "endpoints": {
            remote: {
                "base_url": base_url,
                "auth_token_ref": token_var,
                "is_active": True,
                "public": True,
            }
        },
    }
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("peers")
    a_cfg, a_port = _side(root / "alpha", "swarm-alpha", "swarm-beta")
    b_cfg, b_port = _side(root / "beta", "swarm-beta", "swarm-alpha")
    a_keys, b_keys = root / "alpha/registries/keys.json", root / "beta/registries/keys.json"
    keys = {
        "alpha_admin": create_key(a_keys, "admin", "alpha-admin"),
        "alice": create_key(a_keys, "user", "alice"),
        "beta_on_alpha": create_key(a_keys, "agent", "swarm-beta"),
        "beta_admin": create_key(b_keys, "admin", "beta-admin"),
        "bob": create_key(b_keys, "user", "bob"),
        "alpha_on_beta": create_key(b_keys, "agent", "swarm-alpha"),
    }
    proxy = PrefixProxy(f"http://127.0.0.1:{b_port}").start()
    _registry_file(
        root / "alpha/registries/swarm-alpha.json", "swarm-alpha", "swarm-beta", proxy.base_url
    )
    alpha = ServerProcess(
        root / "alpha",
        a_port,
        args=["--config", str(a_cfg)],
        env={"SWARM_AUTH_TOKEN_SWARM_BETA": keys["alpha_on_beta"]},
    )
    beta = ServerProcess(
        root / "beta",
        b_port,
        args=["--config", str(b_cfg)],
        env={"SWARM_AUTH_TOKEN_SWARM_ALPHA": keys["beta_on_alpha"]},
    )
    beta.start()
    alpha.start()
    try:
        r = httpx.post(
            f"{beta.base_url}/swarms",
            json={"name": "swarm-alpha", "base_url": alpha.base_url, "volatile": False},
            headers=auth(keys["beta_admin"]),
            timeout=20,
        )
        assert r.status_code == 200, r.text
        made = Pair(alpha, beta, proxy, keys)
        made.first_answer = _ask(made, "supervisor@swarm-beta", "hello through the proxy")
        made.first_paths = list(proxy.paths)
        yield made
    finally:
        alpha.stop()
        beta.stop()
        proxy.stop()


def _ask(pair: Pair, target: str, body: str, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        f"{pair.alpha.base_url}/interswarm/message",
        json={"targets": [target], "body": body, "msg_type": "request", "timeout": 30},
        headers=auth(pair.keys["alice"]),
        timeout=timeout,
    )


def _wait_for(predicate: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _swarms_of(pair: Pair) -> dict[str, dict[str, Any]]:
    r = httpx.get(f"{pair.alpha.base_url}/swarms", timeout=10)
    assert r.status_code == 200, r.text
    return {s["swarm_name"]: s for s in r.json()["swarms"]}


# --------------------------------------------------------------------------- path prefix


def test_peer_behind_a_path_prefix_proxy(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    # The registry file's entry: alpha's first health pass went to the proxy, under the
    # prefix, and a message reaches beta through it.
    _wait_for(lambda: "/health" in pair.proxy.paths, "alpha's health check through the proxy")
    r = pair.first_answer
    assert r is not None and r.status_code == 200, r and r.text
    assert r.json()["response"]["message"]["body"] == (
        "supervisor@swarm-beta: hello through the proxy"
    )
    assert "/interswarm/forward" in pair.first_paths

    # POST /swarms takes the same URL (trailing slash and all) and keeps the prefix.
    admin = auth(pair.keys["alpha_admin"])
    before = len(pair.proxy.paths)
    r = httpx.post(
        f"{pair.alpha.base_url}/swarms",
        json={"name": "swarm-beta", "base_url": pair.proxy.base_url + "/", "volatile": False},
        headers=admin,
        timeout=20,
    )
    assert r.status_code == 200, r.text
    assert "/" in pair.proxy.paths[before:]  # its GET / went through the prefix
    stored = json.loads((pair.alpha.directory / "registries/swarm-alpha.json").read_text())
    entry = stored["endpoints"]["swarm-beta"]
    assert entry["base_url"] == pair.proxy.base_url
    assert entry["health_check_url"] == pair.proxy.base_url + "/health"
    before = len(pair.proxy.paths)
    r = _ask(pair, "supervisor@swarm-beta", "after registering")
    assert r.status_code == 200, r.text
    assert r.json()["response"]["message"]["body"] == "supervisor@swarm-beta: after registering"
    assert "/interswarm/forward" in pair.proxy.paths[before:]

    for bad, word in (("?via=proxy", "query"), ("#top", "fragment"), ("?", "query")):
        r = httpx.post(
            f"{pair.alpha.base_url}/swarms",
            json={"name": "swarm-beta", "base_url": pair.proxy.base_url + bad},
            headers=admin,
            timeout=20,
        )
        assert r.status_code == 400, r.text
        assert word in r.json()["detail"]

    # A client pointed at the prefix works too, streaming included (the proxy relays the
    # server-sent events as they come).
    async def scenario() -> tuple[dict[str, Any], list[Any]]:
        async with MAILClient(pair.proxy.base_url, api_key=pair.keys["bob"]) as client:
            health = await client.get_health()
            stream = await client.post_message_stream("streamed via the prefix")
            return health, [event async for event in stream]

    health, events = asyncio.run(scenario())
    assert health["swarm_name"] == "swarm-beta"
    names = [e.event for e in events]
    assert names[0] == "new_message" and names[-1] == "task_complete", names
    assert (
        json.loads(events[-1].data)["response"] == "supervisor@swarm-beta: streamed via the prefix"
    )
    assert "/message" in pair.proxy.paths

    # The stdlib probes append their routes to the prefix as well.
    monkeypatch.setenv("MAIL_STDLIB_NET_ALLOWED_HOSTS", "127.0.0.1")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    url = {"url": pair.proxy.base_url}
    assert asyncio.run(ping_swarm.function(url)) == "pong"
    assert asyncio.run(get_swarm_health.function(url)) == "healthy"
    assert "swarm-alpha@" + pair.alpha.base_url in asyncio.run(get_swarm_registry.function(url))
    # And so does `mail ping`.
    code, out, err = run_cli("ping", pair.proxy.base_url)
    assert code == 0 and "swarm-beta is healthy" in out, (out, err)


# --------------------------------------------------------------------------- restarts


def _register_beta(pair: Pair, base_url: str) -> None:
    r = httpx.post(
        f"{pair.alpha.base_url}/swarms",
        json={"name": "swarm-beta", "base_url": base_url, "volatile": False},
        headers=auth(pair.keys["alpha_admin"]),
        timeout=20,
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("route", ["direct", "proxy"])
def test_restarted_peer_is_reached_without_waiting_for_the_health_interval(
    pair: Pair, route: str
) -> None:
    _register_beta(pair, pair.beta.base_url if route == "direct" else pair.proxy.base_url)
    r = _ask(pair, "supervisor@swarm-beta", "before the restart")
    assert r.status_code == 200, r.text
    pair.beta.stop()
    # Beta is down: the send fails (no connection, or the proxy's 502) and alpha marks beta
    # inactive.
    r = _ask(pair, "supervisor@swarm-beta", "while down")
    assert r.status_code == 200, r.text
    assert "could not be delivered" in r.json()["response"]["message"]["body"]
    endpoint = _swarm_endpoint(pair)
    assert endpoint["is_active"] is False
    pair.beta.start()
    started = time.monotonic()
    r = _ask(pair, "supervisor@swarm-beta", "after the restart")
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert r.json()["response"]["message"]["body"] == "supervisor@swarm-beta: after the restart"
    assert elapsed < 20, elapsed  # far below the 600 s health interval
    assert _swarm_endpoint(pair)["is_active"] is True


def _swarm_endpoint(pair: Pair) -> dict[str, Any]:
    return _swarms_of(pair)["swarm-beta"]


# --------------------------------------------------------------------------- targets


def test_non_entrypoint_remote_target_is_refused_clearly_and_fast(pair: Pair) -> None:
    _register_beta(pair, pair.beta.base_url)
    for target, why in (
        ("worker@swarm-beta", "'worker' is not an entrypoint of swarm 'swarm-beta'"),
        ("nobody@swarm-beta", "'nobody' is not an agent of swarm 'swarm-beta'"),
    ):
        started = time.monotonic()
        r = _ask(pair, target, "hello")
        elapsed = time.monotonic() - started
        # Beta refused the envelope with a 400 that names the reason and the way in, and
        # alpha answers its caller with that 400.
        assert r.status_code == 400, r.text
        detail = r.json()["detail"]
        assert "answered HTTP 400" in detail, detail
        assert why in detail and "entrypoint agents (relay, supervisor)" in detail
        assert elapsed < 10, elapsed

    # Beta's own view: the envelope itself is refused with a 400, and no task was made.
    envelope = {
        "message_id": str(uuid.uuid4()),
        "source_swarm": "swarm-alpha",
        "target_swarm": "swarm-beta",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "payload": {
            "task_id": str(uuid.uuid4()),
            "request_id": str(uuid.uuid4()),
            "sender": {"address_type": "user", "address": "alice@swarm-alpha"},
            "recipient": {"address_type": "agent", "address": "worker@swarm-beta"},
            "subject": "s",
            "body": "b",
            "sender_swarm": "swarm-alpha",
            "recipient_swarm": "swarm-beta",
            "routing_info": {},
        },
        "msg_type": "request",
        "auth_token": pair.keys["alpha_on_beta"],
        "task_owner": "user:alice@swarm-alpha",
        "task_contributors": ["user:alice@swarm-alpha"],
        "metadata": {},
    }
    r = httpx.post(
        f"{pair.beta.base_url}/interswarm/forward",
        json={"message": envelope},
        headers=auth(pair.keys["alpha_on_beta"]),
        timeout=20,
    )
    assert r.status_code == 400, r.text
    assert "'worker' is not an entrypoint of swarm 'swarm-beta'" in r.json()["detail"]
    # The entrypoint itself is still reachable the same way.
    r = _ask(pair, "supervisor@swarm-beta", "hello entrypoint")
    assert r.json()["response"]["message"]["body"] == "supervisor@swarm-beta: hello entrypoint"


# --------------------------------------------------------------------------- reviews


def test_reviewed_action_in_a_peer_task_is_refused_and_the_owner_hears(pair: Pair) -> None:
    _register_beta(pair, pair.beta.base_url)
    started = time.monotonic()
    r = _ask(pair, "supervisor@swarm-beta", "EMAIL the launch moves to Friday")
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    answer = r.json()["response"]["message"]
    # The owner's caller gets beta's answer at once, and it says why nothing was sent.
    assert answer["subject"] == "::task_complete::", answer
    assert answer["body"].startswith("supervisor saw: Error: send_email"), answer["body"]
    assert "review before it runs" in answer["body"]
    assert "swarm-alpha" in answer["body"]
    assert elapsed < 20, elapsed
    task_id = answer["task_id"]

    # On beta the call was never held: no pending review, the refusal is on record, and
    # the action did not run.
    r = httpx.get(f"{pair.beta.base_url}/tasks", headers=auth(pair.keys["beta_admin"]), timeout=10)
    assert r.status_code == 200, r.text
    record = r.json()[task_id]
    assert record["pending_reviews"] == []
    assert record["completed"] is True
    r = httpx.get(
        f"{pair.beta.base_url}/task",
        params={"task_id": task_id},
        headers=auth(pair.keys["beta_admin"]),
        timeout=10,
    )
    events = r.json()["events"]
    names = [e["event"] for e in events]
    assert "action_review" not in names and "action_call" not in names, names
    refused = [e for e in events if e["event"] == "action_error"]
    assert len(refused) == 1
    assert json.loads(refused[0]["data"])["extra_data"]["action"] == "send_email"

    # The same when one of alpha's agents asks beta's supervisor: the answer comes back to
    # the agent, and through it to alice, who called alpha's POST /message.
    r = httpx.post(
        f"{pair.alpha.base_url}/message",
        json={"body": "ASK supervisor@swarm-beta EMAIL minutes", "entrypoint": "relay"},
        headers=auth(pair.keys["alice"]),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    relayed = r.json()["response"]
    assert relayed.startswith("relay got: supervisor saw: Error: send_email"), relayed
    assert "review before it runs" in relayed

    # Beta's own users still get the review, as before.
    r = httpx.post(
        f"{pair.beta.base_url}/message",
        json={"body": "EMAIL local request"},
        headers=auth(pair.keys["bob"]),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    held = json.loads(r.json()["response"])
    assert [h["action"] for h in held] == ["send_email"]


def test_breakpoint_in_a_peer_task_does_not_leave_the_owner_waiting(pair: Pair) -> None:
    """A breakpoint tool pauses a task for its caller to resume; in a task beta runs for
    alpha nobody can (beta's people cannot see it, alpha's caller cannot resume it there)."""
    _register_beta(pair, pair.beta.base_url)
    started = time.monotonic()
    r = _ask(pair, "supervisor@swarm-beta", "BREAK which colour?")
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    answer = r.json()["response"]["message"]
    assert elapsed < 20, (elapsed, answer)
    # The call got an error result instead of pausing; the agent told alpha's caller.
    assert answer["subject"] == "::task_complete::", answer
    assert answer["body"].startswith("supervisor saw: Error: ask_human"), answer["body"]
    assert "pauses the task until a person answers" in answer["body"]
    task_id = answer["task_id"]
    r = httpx.get(f"{pair.beta.base_url}/tasks", headers=auth(pair.keys["beta_admin"]), timeout=10)
    record = r.json()[task_id]
    assert record["completed"] is True and record.get("state") == "completed", record
    assert "pending_breakpoints" not in record or not record["pending_breakpoints"], record

    # Beta's own users still get the pause, as before.
    r = httpx.post(
        f"{pair.beta.base_url}/message",
        json={"body": "BREAK local question"},
        headers=auth(pair.keys["bob"]),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    paused = r.json()["response"]
    assert "ask_human" in paused and "local question" in paused, paused
