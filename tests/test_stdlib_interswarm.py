"""mail.stdlib.interswarm against two real `mail server` processes on loopback.

Also the end-to-end path: an agent of a swarm served by `mail server` calls stdlib actions
(imported through both documented import-string forms) and the results reach its history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from tests.support.stub_agents import _call, _complete, _last_incoming, stub_swarms_json

from mail.stdlib.interswarm import get_swarm_health, get_swarm_registry, ping_swarm

pytestmark = pytest.mark.timeout(180)


def action_caller(name: str, comm_targets: list[str], **_: Any):  # noqa: ANN201
    """Agent factory: a message ``<action> <url>`` makes it call that action with ``url``;
    once a tool result is in its history it completes with ``result: <that result>``."""

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        results = [
            str(item.get("content", item.get("output", "")))
            for item in history
            if item.get("role") == "tool" or item.get("type") == "function_call_output"
        ]
        if results:
            return _complete(f"result: {results[-1]}")
        _, _, body = _last_incoming(history)
        action, _, url = body.strip().partition(" ")
        return None, [_call(action, {"url": url})]

    return agent


def caller_swarm(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": "1.0.0",
        "entrypoint": "prober",
        "public": False,
        "action_imports": [
            "python::mail.stdlib.interswarm.actions:ping_swarm",
            "python::mail.stdlib.interswarm:get_swarm_health",
            "mail.stdlib.interswarm:get_swarm_registry",
            "python::mail.stdlib.http.actions:http_get",
        ],
        "agents": [
            {
                "name": "prober",
                "factory": "python::tests.test_stdlib_interswarm:action_caller",
                "comm_targets": [],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "actions": ["ping_swarm", "get_swarm_health", "get_swarm_registry", "http_get"],
                "agent_params": {},
            }
        ],
        "actions": [],
    }


def _server(
    directory: Path, name: str, swarm: dict[str, Any], allow_loopback: bool
) -> ServerProcess:
    directory.mkdir(parents=True)
    (directory / "swarms.json").write_text(json.dumps([swarm]), encoding="utf-8")
    port = free_port()
    stdlib = '\n[stdlib.net]\nallowed_hosts = ["127.0.0.1"]\n' if allow_loopback else ""
    config = write_config(directory, port=port, swarm=name, extra=stdlib)
    return ServerProcess(directory, port, args=["--config", str(config)])


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("stdlib-interswarm")
    alpha = _server(root / "alpha", "alpha", caller_swarm("alpha"), allow_loopback=True)
    beta = _server(root / "beta", "beta", stub_swarms_json("beta", public=True)[0], False)
    keys = {
        "alice": create_key(alpha.directory / "registries" / "keys.json", "user", "alice"),
        "beta_admin": create_key(beta.directory / "registries" / "keys.json", "admin", "root"),
    }
    alpha.start()
    beta.start()
    yield alpha, beta, keys
    alpha.stop()
    beta.stop()


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MAIL_STDLIB_NET_ALLOWED_HOSTS", "127.0.0.1")


async def test_ping_and_health(servers) -> None:  # type: ignore[no-untyped-def]
    alpha, beta, _ = servers
    assert await ping_swarm.function({"url": alpha.base_url}) == "pong"
    assert await ping_swarm.function({"url": beta.base_url}) == "pong"
    # A trailing slash no longer produces //health.
    assert await get_swarm_health.function({"url": beta.base_url + "/"}) == "healthy"


async def test_health_reports_the_status_an_admin_set(servers) -> None:  # type: ignore[no-untyped-def]
    _, beta, keys = servers
    r = httpx.post(
        f"{beta.base_url}/health",
        json={"status": "draining"},
        headers=auth(keys["beta_admin"]),
        timeout=20,
    )
    assert r.status_code == 200, r.text
    try:
        assert await get_swarm_health.function({"url": beta.base_url}) == "draining"
    finally:
        httpx.post(
            f"{beta.base_url}/health",
            json={"status": "healthy"},
            headers=auth(keys["beta_admin"]),
            timeout=20,
        )


async def test_registry(servers) -> None:  # type: ignore[no-untyped-def]
    alpha, beta, _ = servers
    lines = (await get_swarm_registry.function({"url": beta.base_url})).split("\n")
    assert "beta@" + beta.base_url in [line.replace("localhost", "127.0.0.1") for line in lines]
    # alpha is not public, so its registry lists nothing (unreachable in the original).
    assert await get_swarm_registry.function({"url": alpha.base_url}) == "No swarms found"


async def test_errors(servers) -> None:  # type: ignore[no-untyped-def]
    alpha, _, _ = servers
    assert await ping_swarm.function({}) == "Error: `url` is required"
    assert await ping_swarm.function({"url": 1}) == "Error: `url` must be a string"
    assert await ping_swarm.function({"url": alpha.base_url + "/nowhere"}) == (
        "Error: remote URL returned status code 404"
    )
    assert await ping_swarm.function({"url": alpha.base_url + "/health"}) == (
        "Error: remote URL is not a valid MAIL swarm"
    )
    out = await get_swarm_health.function({"url": f"http://127.0.0.1:{free_port()}"})
    assert out.startswith("Error: ") and len(out) > 10


async def test_guard_refuses_loopback_when_not_allow_listed(
    servers, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    alpha, _, _ = servers
    monkeypatch.delenv("MAIL_STDLIB_NET_ALLOWED_HOSTS")
    for action in (ping_swarm, get_swarm_health, get_swarm_registry):
        out = await action.function({"url": alpha.base_url})
        assert out.startswith("Error: refused to connect to 127.0.0.1: loopback"), out


def _ask(server: ServerProcess, key: str, body: str) -> dict[str, Any]:
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": body, "show_events": True},
        headers=auth(key),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_agent_in_a_served_swarm_calls_stdlib_actions(servers) -> None:  # type: ignore[no-untyped-def]
    alpha, beta, keys = servers
    data = _ask(alpha, keys["alice"], f"ping_swarm {beta.base_url}")
    # The agent completed with the tool result it found in its history.
    assert data["response"] == "result: SUCCESS: pong"
    completes = [e for e in data["events"] if e["event"] == "action_complete"]
    assert completes and "pong" in completes[0]["data"]["description"]
    calls = [e for e in data["events"] if e["event"] == "action_call"]
    assert "ping_swarm" in calls[0]["data"]["description"]

    data = _ask(alpha, keys["alice"], f"get_swarm_registry {beta.base_url}")
    assert data["response"].startswith("result: SUCCESS: beta@")

    # The server's own [stdlib.net] allow-list covers 127.0.0.1 only: the guard still
    # refuses the metadata address, and the agent sees that as the action's text.
    data = _ask(alpha, keys["alice"], "http_get http://169.254.169.254/latest/meta-data/")
    assert data["response"].startswith("result: SUCCESS: Error: refused to connect to 169.254")
