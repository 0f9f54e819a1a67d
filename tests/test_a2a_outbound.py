"""A MAIL swarm calling stock a2a-sdk agents as `agent@peer` (registry entries of kind a2a):
answers from a streaming peer (card `capabilities.streaming`: the SDK's streaming send, each
update an `interswarm_message_progress` event) and a non-streaming one, input-required and its
follow-up, failure, timeout, a dead peer, and the address guard at registration."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth
from support.a2a_peers import hub_server, sample_a2a_process, sample_a2a_server

pytestmark = pytest.mark.timeout(300)

MAX_UPDATES, MAX_CHARS = 8, 50
EXTRA = f"""interswarm_timeout = 3
max_a2a_peer_updates = {MAX_UPDATES}
max_a2a_peer_update_chars = {MAX_CHARS}

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
            for peer, path in (("echoer", "echo"), ("plainer", "plain"), ("streamer", "stream")):
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


def _events(server: ServerProcess, task_id: str) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(server.keys["alice"])
    )
    assert r.status_code == 200, r.text
    return r.json()["events"]  # type: ignore[no-any-return]


def _progress(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The extra_data of the task's interswarm_message_progress events, in order."""
    found = []
    for event in events:
        if event["event"] == "interswarm_message_progress":
            data = event["data"]
            found.append((json.loads(data) if isinstance(data, str) else data)["extra_data"])
    return found


# echoer's card says streaming (the SDK's streaming send); plainer's does not (one blocking send).
@pytest.mark.parametrize("peer", ["echoer", "plainer"])
def test_agent_at_peer_gets_the_a2a_answer(world: Any, peer: str) -> None:
    server, _, _ = world
    answer = _ask(server, f"ASK echo@{peer} hello A2A")
    assert answer["response"] == "relay got: echo: hello A2A"
    progress = _progress(_events(server, answer["task_id"]))
    if peer == "plainer":
        assert progress == []
    else:
        assert [(p["kind"], p.get("state"), p["text"]) for p in progress] == [
            ("status", "working", ""),
            ("artifact", None, "echo: hello A2A"),
            ("status", "completed", ""),
        ]


async def test_streamed_updates_reach_the_task_stream_while_the_peer_works(world: Any) -> None:
    from mail.client import MAILClient
    from mail.client_config import ClientConfig

    server, sample, _ = world
    gate = uuid.uuid4().hex
    seen: list[tuple[str, dict[str, Any]]] = []
    async with (
        MAILClient(server.base_url, api_key=server.keys["alice"], config=ClientConfig()) as client,
        httpx.AsyncClient() as http,
    ):
        async for frame in client.post_message_stream(f"ASK stream@streamer GATED {gate}"):
            data = json.loads(frame.data) if frame.data else {}
            seen.append((frame.event, data))
            extra = data.get("extra_data") or {}
            if frame.event == "interswarm_message_progress" and extra.get("text") == "one":
                # The peer holds back its next chunk until this gate opens: the first one
                # reached the caller's stream while the A2A call was still running.
                assert (await http.post(f"{sample}/gates/{gate}")).status_code == 204
    names = [name for name, _ in seen]
    progress = [data["extra_data"] for name, data in seen if name == "interswarm_message_progress"]
    assert [(p["kind"], p.get("state") or p["text"]) for p in progress] == [
        ("status", "working"),
        ("artifact", "one"),
        ("artifact", "two"),
        ("artifact", "three"),
        ("status", "completed"),
    ]
    assert [p["update"] for p in progress] == [1, 2, 3, 4, 5]
    assert {(p["agent"], p["swarm"]) for p in progress} == {("stream@streamer", "streamer")}
    assert [p["append"] for p in progress if p["kind"] == "artifact"] == [False, True, True]
    last_progress = max(i for i, name in enumerate(names) if name == "interswarm_message_progress")
    assert names.index("interswarm_message_received") > last_progress
    assert names[-1] == "task_complete"
    assert seen[-1][1]["response"] == "relay got: one\ntwo\nthree"


def test_updates_kept_per_call_are_bounded(world: Any) -> None:
    server, _, _ = world
    answer = _ask(server, "ASK stream@streamer MANY 30")
    assert answer["response"] == "relay got: " + "\n".join(f"c{i}" for i in range(30))
    progress = _progress(_events(server, answer["task_id"]))
    assert len(progress) == MAX_UPDATES + 1
    assert [p["update"] for p in progress[:-1]] == list(range(1, MAX_UPDATES + 1))
    # working, 30 chunks, completed: all but the first MAX_UPDATES are summed up in one event.
    assert progress[-1]["kind"] == "overflow"
    assert progress[-1]["not_shown"] == 32 - MAX_UPDATES

    long = _ask(server, "ASK stream@streamer LONG 500")
    assert long["response"] == "relay got: " + "x" * 500  # the answer itself is whole
    chunk = [p for p in _progress(_events(server, long["task_id"])) if p["kind"] == "artifact"]
    assert chunk[0]["text"] == "x" * MAX_CHARS and chunk[0]["truncated"] is True


@pytest.mark.parametrize("peer", ["echoer", "plainer"])
def test_input_required_is_answerable_in_the_same_task(world: Any, peer: str) -> None:
    server, _, _ = world
    task_id = str(uuid.uuid4())
    first = _ask(server, f"ASK echo@{peer} ASK which colour?", task_id)
    assert first["response"] == "relay got: which colour?"
    second = _ask(server, f"ASK echo@{peer} blue", task_id)
    assert second["response"] == "relay got: got: blue"
    events = _events(server, task_id)
    assert sum(e["event"] == "interswarm_message_received" for e in events) == 2
    states = [p.get("state") for p in _progress(events) if p["kind"] == "status"]
    expected = ["working", "input-required", "working", "completed"]
    assert states == (expected if peer == "echoer" else [])


@pytest.mark.parametrize("peer", ["echoer", "plainer"])
def test_failed_a2a_task_reaches_the_sender_as_an_error(world: Any, peer: str) -> None:
    server, _, _ = world
    answer = _ask(server, f"ASK echo@{peer} FAIL")["response"]
    assert answer.startswith("error: "), answer
    assert "ended the task as failed: echo failed on purpose" in answer


@pytest.mark.parametrize("peer", ["echoer", "plainer"])
def test_slow_a2a_agent_times_out(world: Any, peer: str) -> None:
    server, _, _ = world
    answer = _ask(server, f"ASK echo@{peer} SLOW 10 late")
    assert "did not answer within 3s" in answer["response"], answer
    if peer == "echoer":  # what the peer said before it went quiet is in the task
        progress = _progress(_events(server, answer["task_id"]))
        assert [(p["kind"], p["state"]) for p in progress] == [("status", "working")]


def test_dead_peer_is_reported_and_marked_inactive(world: Any) -> None:
    server, _, directory = world
    with sample_a2a_server(directory) as doomed:
        assert _register(server, "doomed", f"{doomed}/echo").status_code == 200
    answer = _ask(server, "ASK echo@doomed anyone?")["response"]
    assert answer.startswith("error: "), answer
    assert "doomed" in answer and ("cannot connect" in answer or "not active" in answer), answer


async def test_a_peer_dying_mid_stream_is_reported_at_once(world: Any) -> None:
    from mail.client import MAILClient
    from mail.client_config import ClientConfig

    server, _, directory = world
    seen: list[tuple[str, dict[str, Any]]] = []
    with sample_a2a_process(directory) as (dying, process):
        assert _register(server, "dying", f"{dying}/stream").status_code == 200
        key = server.keys["alice"]
        async with MAILClient(server.base_url, api_key=key, config=ClientConfig()) as client:
            async for frame in client.post_message_stream(f"ASK stream@dying GATED {uuid.uuid4()}"):
                data = json.loads(frame.data) if frame.data else {}
                seen.append((frame.event, data))
                if (data.get("extra_data") or {}).get("text") == "one":
                    process.kill()  # mid-stream: the first chunk arrived, the gate is shut
    answer = seen[-1][1]["response"]
    assert seen[-1][0] == "task_complete"
    assert answer.startswith("error: ") and "'dying' failed" in answer, answer
    assert (
        "did not answer within" not in answer
    )  # the broken stream ended the call, not the timeout
    assert "interswarm_message_error" in [name for name, _ in seen]


def test_address_guard_applies_to_a2a_peers(world: Any) -> None:
    server, sample, _ = world
    other_loopback = sample.replace("127.0.0.1", "127.0.0.2")
    r = _register(server, "sneaky", f"{other_loopback}/echo")
    assert r.status_code == 500, r.text
    assert "loopback" in r.text and "allowed_hosts" in r.text, r.text
