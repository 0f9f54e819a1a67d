"""Two callers of one swarm, each with a task of the same id, talking to the same peers
(issue 39, item 1): the stock a2a-sdk echo agent (tests/support/a2a_sample_server.py) and a
MAIL swarm. Each user has their own MAIL instance, so the same task id is easy to come by (an
A2A `contextId` such as "chat" maps to the same MAIL task id for everyone; here both simply
name it in POST /message).

Neither may continue the other's conversation with a peer or read what the other said there,
the context the peer is sent names neither the caller nor the task, and a MAIL peer that
refuses the second caller does not tell them who the first one was.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.interswarm_agents import swarm_json

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.a2a_peers import hub_server, sample_a2a_server

pytestmark = pytest.mark.timeout(300)

EXTRA = """interswarm_timeout = 10

[stdlib.net]
allowed_hosts = ["127.0.0.1"]
"""


def _register(server: ServerProcess, body: dict[str, Any]) -> None:
    r = httpx.post(
        f"{server.base_url}/swarms", json=body, headers=auth(server.keys["admin"]), timeout=60
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The relay swarm `hub` (users alice and bob) with the A2A peer `echoer` and the MAIL
    peer `beta` (whose `worker` answers `beta says: <text>`)."""
    root = tmp_path_factory.mktemp("a2a_callers")
    hub_dir, beta_dir = root / "hub", root / "beta"
    hub_dir.mkdir()
    beta_dir.mkdir()
    hub = hub_server(hub_dir, EXTRA, peers=("echoer",), more_targets=("worker@beta",))
    hub_keys = hub_dir / "registries" / "keys.json"
    hub.keys["bob"] = create_key(hub_keys, "user", "bob")
    beta_on_hub = create_key(hub_keys, "agent", "beta")

    beta_swarms = swarm_json("beta", "hub")
    for agent in beta_swarms[0]["agents"]:
        if agent["name"] == "worker":  # answers whoever asks: here the hub's relay
            agent["comm_targets"].append("relay@hub")
    (beta_dir / "swarms.json").write_text(json.dumps(beta_swarms), "utf-8")
    beta_port = free_port()
    beta_config = write_config(beta_dir, port=beta_port, swarm="beta", extra=EXTRA)
    beta_keys = beta_dir / "registries" / "keys.json"
    beta = ServerProcess(
        beta_dir,
        beta_port,
        args=["--config", str(beta_config)],
        env={"SWARM_AUTH_TOKEN_HUB": beta_on_hub},
    )
    beta.keys["admin"] = create_key(beta_keys, "admin", "beta-admin")
    hub.env = {"SWARM_AUTH_TOKEN_BETA": create_key(beta_keys, "agent", "hub")}

    with sample_a2a_server(root) as sample:
        hub.start()
        beta.start()
        try:
            _register(
                hub, {"name": "echoer", "base_url": f"{sample}/echo", "metadata": {"kind": "a2a"}}
            )
            _register(hub, {"name": "beta", "base_url": beta.base_url, "volatile": False})
            _register(beta, {"name": "hub", "base_url": hub.base_url, "volatile": False})
            yield hub
        finally:
            beta.stop()
            assert hub.stop() == 0, hub.logs()


def _ask(hub: ServerProcess, who: str, text: str, task_id: str) -> str:
    r = httpx.post(
        f"{hub.base_url}/message",
        json={"body": text, "task_id": task_id},
        headers=auth(hub.keys[who]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["task_id"] == task_id
    return str(r.json()["response"])


def test_a_second_caller_does_not_continue_the_first_ones_a2a_conversation(
    hub: ServerProcess,
) -> None:
    task_id = str(uuid.uuid4())
    # Alice's task asks the peer, which asks her back (its task waits for her input).
    assert _ask(hub, "alice", "ASK echo@echoer ASK which colour?", task_id) == (
        "relay got: which colour?"
    )
    # Bob's task has the same id: his message starts his own conversation with the peer; it
    # does not answer the question the peer asked Alice.
    assert _ask(hub, "bob", "ASK echo@echoer hello from bob", task_id) == (
        "relay got: echo: hello from bob"
    )
    # Alice's conversation is still hers: her answer reaches the peer's question.
    assert _ask(hub, "alice", "ASK echo@echoer blue", task_id) == "relay got: got: blue"


def test_a_second_caller_never_reads_what_the_first_said_to_the_peer(hub: ServerProcess) -> None:
    task_id = str(uuid.uuid4())
    assert _ask(hub, "alice", "ASK echo@echoer alice's secret", task_id) == (
        "relay got: echo: alice's secret"
    )
    # The peer keeps what each context was told: Bob's context is not Alice's.
    assert _ask(hub, "bob", "ASK echo@echoer RECALL", task_id) == "relay got: recall: "
    assert _ask(hub, "alice", "ASK echo@echoer RECALL", task_id) == (
        "relay got: recall: alice's secret"
    )


def test_the_context_sent_to_a_peer_names_neither_caller_nor_task(hub: ServerProcess) -> None:
    task_id, other_task = str(uuid.uuid4()), str(uuid.uuid4())
    seen = {}
    for who, task in (("alice", task_id), ("bob", task_id), ("alice", other_task)):
        answer = _ask(hub, who, "ASK echo@echoer CONTEXT", task)
        assert answer.startswith("relay got: context: "), answer
        seen[(who, task)] = answer.removeprefix("relay got: context: ")
    # One caller's task keeps its context with the peer (a conversation goes on)...
    assert _ask(hub, "alice", "ASK echo@echoer CONTEXT", task_id) == (
        f"relay got: context: {seen[('alice', task_id)]}"
    )
    # ... another caller's task, or another task of the same caller, has its own.
    assert len(set(seen.values())) == 3, seen
    for context in seen.values():
        uuid.UUID(context)  # an opaque UUID
        assert task_id not in context and other_task not in context
        assert "alice" not in context and "bob" not in context


def test_a_mail_peer_refusing_a_second_caller_does_not_name_the_first(
    hub: ServerProcess,
) -> None:
    task_id = str(uuid.uuid4())
    assert _ask(hub, "alice", "ASK worker@beta hi from alice", task_id) == (
        "relay got: beta says: hi from alice"
    )
    # The MAIL peer already holds a task of this id, Alice's: Bob's is refused, without a
    # word about whose it is.
    answer = _ask(hub, "bob", "ASK worker@beta hi from bob", task_id)
    assert answer.startswith("error: "), answer
    assert "alice" not in answer, answer
    assert "belongs to someone else" in answer, answer
