"""A MAIL swarm calling A2A agents that misbehave (tests/support/hostile_a2a.py): answers over
the byte cap, redirects, non-JSON, a card over the cap, a card that names another origin for
its endpoint (the registry's token must not follow it), a card naming another agent; streams
that go on after their final state, mix in another task's events, or carry ids, names, texts
and error messages of hundreds of thousands of characters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.a2a_peers import HOSTILE_PEERS, hub_server
from support.hostile_a2a import HostileA2A

pytestmark = pytest.mark.timeout(300)

TIMEOUT = 5
CAP = 100  # max_a2a_peer_update_chars
EXTRA = f"""interswarm_timeout = {TIMEOUT}
max_a2a_peer_update_chars = {CAP}

[stdlib.net]
allowed_hosts = ["127.0.0.1"]
"""
TOKEN = "peer-token-0123456789abcdef"
PROGRESS = "interswarm_message_progress"


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
    return _ask_task(server, text)[0]


def _ask_task(server: ServerProcess, text: str) -> tuple[str, str]:
    """(the answer, the MAIL task id) of a POST /message."""
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": text},
        headers=auth(server.keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["response"]), str(r.json()["task_id"])


def _events(server: ServerProcess, task_id: str, kind: str) -> list[dict[str, Any]]:
    """The (description, extra_data) of the task's events of one kind, in order."""
    r = httpx.get(
        f"{server.base_url}/task",
        params={"task_id": task_id},
        headers=auth(server.keys["alice"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    found = []
    for event in r.json()["events"]:
        if event["event"] == kind:
            data = event["data"]
            found.append(json.loads(data) if isinstance(data, str) else data)
    return found


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


@pytest.mark.parametrize(
    ("peer", "answer"),
    [("lingers", "relay got: LINGERED"), ("asks", "relay got: which one?")],
)
def test_the_first_final_state_ends_the_call_and_closes_the_stream(
    world: Any, peer: str, answer: str
) -> None:
    """``completed`` / ``input-required``, then ``working`` updates every 50 ms, never closed."""
    server, hostile = world
    assert _ask(server, f"ASK stream@{peer} hi") == answer  # not the timeout's error
    assert hostile.closed_by_caller[peer].wait(10), "the stream was left open"


def test_a_state_after_the_final_one_changes_nothing(world: Any) -> None:
    server, _ = world
    answer, task_id = _ask_task(server, "ASK stream@flips hi")  # completed, then failed
    assert answer == "relay got: FIRST WORD"
    states = [e["extra_data"].get("state") for e in _events(server, task_id, PROGRESS)]
    assert states == [None, "completed"], states  # the artifact, the final state; no "failed"


def test_another_tasks_events_are_not_this_calls(world: Any) -> None:
    server, _ = world
    answer, task_id = _ask_task(server, "ASK stream@others hi")
    assert answer == "relay got: MINE"  # not ended by the other task's failure, nor its text
    shown = json.dumps(_events(server, task_id, PROGRESS))
    assert "NOT MINE" not in shown and "another-task" not in shown, shown


def test_peer_ids_names_and_texts_in_events_are_capped(world: Any) -> None:
    server, _ = world
    answer, task_id = _ask_task(server, "ASK stream@bigfields hi")
    assert answer == "relay got: " + "x" * 200_000  # the answer is whole (max_response_bytes)
    progress = _events(server, task_id, PROGRESS)
    assert [e["extra_data"]["kind"] for e in progress] == ["artifact", "status"]
    for event in progress:
        extra = event["extra_data"]
        assert extra["truncated"] is True, extra.keys()
        for key, value in extra.items():
            assert not isinstance(value, str) or len(value) <= CAP, (key, len(value))
        assert len(event["description"]) <= 2 * CAP + 100, len(event["description"])
        assert extra["a2a_task_id"] == "T" * CAP
    assert progress[0]["extra_data"]["artifact_name"] == "N" * CAP
    assert progress[0]["extra_data"]["artifact_id"] == "I" * CAP


# A JSON-RPC error answer, a JSON-RPC error event, an SSE error event, a failed task's status.
@pytest.mark.parametrize(
    ("peer", "said"),
    [("errorplain", "E"), ("errorevent", "E"), ("sseerror", "S"), ("failsloud", "F")],
)
def test_a_peers_error_text_is_capped(world: Any, peer: str, said: str) -> None:
    server, _ = world
    logged = len(server.logs())
    answer, task_id = _ask_task(server, f"ASK stream@{peer} hi")
    assert answer.startswith("error: ") and said * 20 in answer, answer[:300]
    assert said * (CAP + 1) not in answer and len(answer) < CAP + 600, len(answer)
    assert "max_a2a_peer_update_chars" in answer, answer  # says it was cut, and by what
    errors = _events(server, task_id, "interswarm_message_error")
    assert len(errors) == 1 and len(errors[0]["description"]) < CAP + 600, errors
    assert len(server.logs()) - logged < 20_000  # nor copied whole into the server's log
