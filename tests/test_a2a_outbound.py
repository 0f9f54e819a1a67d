"""A MAIL swarm calling stock a2a-sdk agents as `agent@peer` (registry entries of kind a2a):
answers, streamed chunks, input-required and its follow-up, failure, timeout, a dead peer,
and the address guard at registration."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.a2a_peers import hub_server, sample_a2a_server

pytestmark = pytest.mark.timeout(300)

EXTRA = """interswarm_timeout = 3

[stdlib.net]
allowed_hosts = ["127.0.0.1"]
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, Path]]:
    directory = tmp_path_factory.mktemp("a2a_out")
    server = hub_server(directory, EXTRA)
    with sample_a2a_server(directory) as sample:
        server.start()
        try:
            for peer, path in (("echoer", "echo"), ("streamer", "stream")):
                _register(server, peer, f"{sample}/{path}")
            yield server, sample, directory
        finally:
            assert server.stop() == 0, server.logs()


def _register(server: ServerProcess, name: str, base_url: str) -> httpx.Response:
    r = httpx.post(
        f"{server.base_url}/swarms",
        json={"name": name, "base_url": base_url, "metadata": {"kind": "a2a"}},
        headers=auth(server.keys["admin"]),
        timeout=60,
    )
    return r


def _ask(server: ServerProcess, text: str, task_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"body": text}
    if task_id:
        body["task_id"] = task_id
    r = httpx.post(
        f"{server.base_url}/message", json=body, headers=auth(server.keys["alice"]), timeout=60
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_registered_a2a_agent_is_listed_with_its_card(world: Any) -> None:
    server, sample, _ = world
    r = httpx.get(f"{server.base_url}/swarms/registry", headers=auth(server.keys["admin"]))
    entry = {e["swarm_name"]: e for e in r.json()["swarms"]}["echoer"]
    assert entry["metadata"] == {"kind": "a2a"}
    assert entry["base_url"] == f"{sample}/echo"
    assert entry["swarm_description"] == "stock a2a-sdk echo agent"  # read from its card
    assert entry["is_active"] is True


def test_agent_at_peer_gets_the_a2a_answer(world: Any) -> None:
    server, _, _ = world
    assert _ask(server, "ASK echo@echoer hello A2A")["response"] == "relay got: echo: hello A2A"


def test_streamed_chunks_arrive_as_one_answer(world: Any) -> None:
    server, _, _ = world
    assert _ask(server, "ASK stream@streamer go")["response"] == "relay got: one\ntwo\nthree"


def test_input_required_is_answerable_in_the_same_task(world: Any) -> None:
    server, _, _ = world
    task_id = str(uuid.uuid4())
    first = _ask(server, "ASK echo@echoer ASK which colour?", task_id)
    assert first["response"] == "relay got: which colour?"
    second = _ask(server, "ASK echo@echoer blue", task_id)
    assert second["response"] == "relay got: got: blue"
    events = httpx.get(
        f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(server.keys["alice"])
    ).json()["events"]
    assert sum(e["event"] == "interswarm_message_received" for e in events) == 2


def test_failed_a2a_task_reaches_the_sender_as_an_error(world: Any) -> None:
    server, _, _ = world
    answer = _ask(server, "ASK echo@echoer FAIL")["response"]
    assert answer.startswith("error: "), answer
    assert "ended the task as failed: echo failed on purpose" in answer


def test_slow_a2a_agent_times_out(world: Any) -> None:
    server, _, _ = world
    answer = _ask(server, "ASK echo@echoer SLOW 10 late")["response"]
    assert "did not answer within 3s" in answer, answer


def test_dead_peer_is_reported_and_marked_inactive(world: Any) -> None:
    server, _, directory = world
    with sample_a2a_server(directory) as doomed:
        assert _register(server, "doomed", f"{doomed}/echo").status_code == 200
    answer = _ask(server, "ASK echo@doomed anyone?")["response"]
    assert answer.startswith("error: "), answer
    assert "doomed" in answer and ("cannot connect" in answer or "not active" in answer), answer


def test_address_guard_applies_to_a2a_peers(world: Any) -> None:
    server, sample, _ = world
    other_loopback = sample.replace("127.0.0.1", "127.0.0.2")
    r = _register(server, "sneaky", f"{other_loopback}/echo")
    assert r.status_code == 500, r.text
    assert "loopback" in r.text and "allowed_hosts" in r.text, r.text
