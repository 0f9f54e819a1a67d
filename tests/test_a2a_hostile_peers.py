"""A MAIL swarm calling A2A agents that misbehave (tests/support/hostile_a2a.py): answers over
the byte cap, redirects, non-JSON, a card over the cap, a card that names another origin for
its endpoint (the registry's token must not follow it), a card naming another agent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.a2a_peers import HOSTILE_PEERS, hub_server
from support.hostile_a2a import HostileA2A

pytestmark = pytest.mark.timeout(300)

EXTRA = """interswarm_timeout = 5

[stdlib.net]
allowed_hosts = ["127.0.0.1"]
"""
TOKEN = "peer-token-0123456789abcdef"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, HostileA2A]]:
    directory = tmp_path_factory.mktemp("a2a_hostile")
    server = hub_server(directory, EXTRA, HOSTILE_PEERS)
    with HostileA2A() as hostile:
        server.start()
        try:
            for peer in HOSTILE_PEERS:
                if peer != "hugecard":
                    r = _register(server, peer, f"{hostile.url}/{peer}")
                    assert r.status_code == 200, r.text
            yield server, hostile
        finally:
            assert server.stop() == 0, server.logs()


def _register(server: ServerProcess, name: str, base_url: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/swarms",
        json={
            "name": name,
            "base_url": base_url,
            "auth_token": TOKEN,
            "metadata": {"kind": "a2a"},
            "volatile": True,
        },
        headers=auth(server.keys["admin"]),
        timeout=60,
    )


def _ask(server: ServerProcess, text: str) -> str:
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": text},
        headers=auth(server.keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["response"])


def test_a_card_naming_another_agent_keeps_the_registry_name(world: Any) -> None:
    server, hostile = world
    assert _ask(server, "ASK echo@good hi") == "relay got: fine"
    assert hostile.seen_auth[-1] == f"Bearer {TOKEN}"  # its own origin gets the token
    r = httpx.get(f"{server.base_url}/swarms/registry", headers=auth(server.keys["admin"]))
    entry = {e["swarm_name"]: e for e in r.json()["swarms"]}["good"]
    assert entry["swarm_description"] == "hostile good"


def test_an_answer_over_the_cap_is_an_error(world: Any) -> None:
    server, _ = world
    answer = _ask(server, "ASK echo@huge hi")
    assert answer.startswith("error: ") and "max_response_bytes" in answer, answer


def test_a_redirect_is_not_followed(world: Any) -> None:
    server, hostile = world
    before = len(hostile.collector_auth)
    answer = _ask(server, "ASK echo@redirect hi")
    assert answer.startswith("error: ") and "redirect" in answer, answer
    assert len(hostile.collector_auth) == before


def test_a_non_json_answer_is_an_error(world: Any) -> None:
    server, _ = world
    answer = _ask(server, "ASK echo@garbage hi")
    assert answer.startswith("error: ") and "JSON" in answer, answer


def test_a_card_over_the_cap_fails_registration(world: Any) -> None:
    server, hostile = world
    r = _register(server, "hugecard", f"{hostile.url}/hugecard")
    assert r.status_code == 500 and "max_response_bytes" in r.text, r.text


def test_the_token_does_not_follow_a_card_to_another_origin(world: Any) -> None:
    server, hostile = world
    assert _ask(server, "ASK echo@elsewhere hi") == "relay got: fine"
    assert hostile.collector_auth, "the card's endpoint was called"
    assert hostile.collector_auth[-1] is None, hostile.collector_auth
