"""Edges of what callers send, against a real `mail server` (stub agents) over HTTP:

- a subject is bounded (`[server.settings] max_subject_chars`) on POST /message, on
  /interswarm/message and over A2A (the SDK's own client), with one clear answer;
- `max_steps` past 64 bits says it is too large (the JSON parser reads it as a float);
- a non-ASCII `Last-Event-ID` is refused without echoing mojibake;
- the interswarm routes of a swarm without interswarm answer 409 saying how to turn it on.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator

import httpx
import pytest
from a2a.helpers.proto_helpers import get_message_text
from a2a.types.a2a_pb2 import TaskState

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server, post_as
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(180)

LIMIT = 50  # max_subject_chars of the test server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {**ROOT_ALICE_BOB, "peer": ("agent", "peer")}
    extra = f"max_subject_chars = {LIMIT}\n"
    with keyed_stub_server(tmp_path_factory.mktemp("edges"), keys, extra=extra) as srv:
        yield srv


# -- subject -------------------------------------------------------------------------------
def test_a_subject_over_the_limit_is_413_naming_the_setting(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"body": "hi", "subject": "s" * (LIMIT + 1)})
    assert r.status_code == 413, r.text
    assert r.json()["detail"] == (
        f"parameter 'subject' is {LIMIT + 1} characters; the limit is {LIMIT} "
        "([server.settings] max_subject_chars)"
    )
    ok = post_as(server, "alice", {"body": "hi", "subject": "s" * LIMIT})
    assert ok.status_code == 200, ok.text


def test_a_streamed_message_with_a_long_subject_is_refused_before_the_stream(
    server: ServerProcess,
) -> None:
    r = post_as(server, "alice", {"body": "hi", "subject": "s" * 10_000, "stream": True})
    assert r.status_code == 413, r.text
    assert "max_subject_chars" in r.json()["detail"]


async def test_a2a_applies_the_same_subject_bound(server: ServerProcess) -> None:
    async with a2a_client(server.base_url, server.keys["alice"], streaming=False) as client:
        events = await collect(client, message("hi", {"subject": "s" * (LIMIT + 1)}))
        task = events[-1].task
        assert task.status.state == TaskState.TASK_STATE_REJECTED, task
        text = get_message_text(task.status.message)
        assert text.startswith("413: ") and "max_subject_chars" in text, text

        events = await collect(client, message("hi", {"subject": "s" * LIMIT}))
        assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED


# -- max_steps -------------------------------------------------------------------------------
def test_a_max_steps_past_64_bits_says_it_is_too_large(server: ServerProcess) -> None:
    raw = b'{"body": "hi", "kwargs": {"max_steps": 99999999999999999999999}}'
    r = httpx.post(
        f"{server.base_url}/message",
        content=raw,
        headers={**auth(server.keys["alice"]), "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert "too large" in detail and str(2**63 - 1) in detail, detail
    assert "float" not in detail


def test_a_fractional_max_steps_names_the_number(server: ServerProcess) -> None:
    r = post_as(server, "alice", {"body": "hi", "kwargs": {"max_steps": 2.5}})
    assert r.status_code == 400, r.text
    assert r.json()["detail"].endswith("got 2.5")


# -- Last-Event-ID -----------------------------------------------------------------------------
def _raw_get(server: ServerProcess, path: str, headers: list[tuple[str, bytes]]) -> bytes:
    """A GET with header values sent as raw bytes (clients refuse non-ASCII values)."""
    lines = [f"GET {path} HTTP/1.1".encode(), f"Host: 127.0.0.1:{server.port}".encode()]
    lines += [name.encode() + b": " + value for name, value in headers]
    lines += [b"Connection: close", b"", b""]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"\r\n".join(lines))
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_non_ascii_last_event_id_is_refused_without_mojibake(server: ServerProcess) -> None:
    task_id = post_as(server, "alice", {"body": "hi"}).json()["task_id"]
    answer = _raw_get(
        server,
        f"/task/events?task_id={task_id}",
        [
            ("Authorization", f"Bearer {server.keys['alice']}".encode()),
            ("Last-Event-ID", "é3".encode()),
        ],
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:300]
    text = body.decode("utf-8")
    assert "Last-Event-ID must be an event id" in text, text
    assert "Ã" not in text and "é" not in text, text
    assert json.loads(text) == {
        "detail": "Last-Event-ID must be an event id (a non-negative integer)"
    }


def test_other_scripts_digits_are_not_event_ids(server: ServerProcess) -> None:
    # int() reads Arabic-Indic digits as 12: an id is ASCII digits only.
    r = httpx.get(
        f"{server.base_url}/task/events",
        params={"task_id": str(uuid.uuid4()), "after": "١٢"},
        headers=auth(server.keys["alice"]),
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert "after must be an event id" in r.json()["detail"]


# -- interswarm off ----------------------------------------------------------------------------
def test_interswarm_message_on_a_swarm_without_interswarm_is_409_saying_how(
    server: ServerProcess,
) -> None:
    r = httpx.post(
        f"{server.base_url}/interswarm/message",
        json={"body": "hi", "targets": ["supervisor@elsewhere"]},
        headers=auth(server.keys["alice"]),
        timeout=30,
    )
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    assert detail.startswith("interswarm is off for swarm 'stub'"), detail
    assert '"enable_interswarm": true' in detail and "restart" in detail


def test_interswarm_forward_to_a_swarm_without_interswarm_is_409(server: ServerProcess) -> None:
    task_id = str(uuid.uuid4())
    envelope = {
        "message_id": str(uuid.uuid4()),
        "source_swarm": "far",
        "target_swarm": "stub",
        "timestamp": "2025-01-01T00:00:00+00:00",
        "payload": {
            "task_id": task_id,
            "request_id": str(uuid.uuid4()),
            "sender": {"address_type": "agent", "address": "scout@far"},
            "recipient": {"address_type": "agent", "address": "supervisor"},
            "subject": "hello",
            "body": "from far away",
            "sender_swarm": "far",
            "recipient_swarm": "stub",
            "routing_info": {},
        },
        "msg_type": "request",
        "auth_token": "unused",
        "task_owner": "user:u@far",
        "task_contributors": ["user:u@far"],
        "metadata": {},
    }
    r = httpx.post(
        f"{server.base_url}/interswarm/forward",
        json={"message": envelope},
        headers=auth(server.keys["peer"]),
        timeout=30,
    )
    assert r.status_code == 409, r.text
    assert r.json()["detail"].startswith("interswarm is off for swarm 'stub'")
