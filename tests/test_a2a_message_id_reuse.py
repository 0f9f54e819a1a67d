"""A2A: a messageId sent again with another message is refused, not answered with the first.

The bridge treats a repeated ``messageId`` as a retry of the same message (docs/a2a.md). A
client that reuses an id for a *different* message (the docs' curl example has a fixed
``"messageId": "m-1"``) used to get the first message's task back: the new message never ran
and nothing said so. Like ``Idempotency-Key`` with another body (422), it is now an error
(invalid params) naming the messageId, and nothing runs; a true retry still gets its task.
Over real HTTP with JSON-RPC as curl sends it, against a real ``mail server``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

INVALID_PARAMS = -32602


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path_factory.mktemp("a2a_mid"), ROOT_ALICE_BOB) as srv:
        yield srv


def send(
    server: ServerProcess,
    who: str,
    text: str,
    message_id: str,
    *,
    context_id: str | None = None,
    method: str = "SendMessage",
) -> httpx.Response:
    msg: dict[str, Any] = {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]}
    if context_id is not None:
        msg["contextId"] = context_id
    return httpx.post(
        f"{server.base_url}/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": msg}},
        headers={**auth(server.keys[who]), "A2A-Version": "1.0"},
        timeout=60,
    )


def mail_tasks(server: ServerProcess, who: str) -> set[str]:
    found = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[who]), timeout=30)
    return set(found.json())


def answer_of(response: httpx.Response) -> str:
    task = response.json()["result"]["task"]
    parts = [p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"]]
    return "".join(parts)


def test_a_reused_message_id_with_another_text_is_refused(server: ServerProcess) -> None:
    mid = f"m-{uuid.uuid4().hex[:8]}"
    first = send(server, "alice", "first question", mid)
    assert first.status_code == 200 and "result" in first.json(), first.text
    assert "first question" in answer_of(first)
    before = mail_tasks(server, "alice")

    other = send(server, "alice", "second question", mid)
    error = other.json().get("error")
    assert error is not None, f"the second message was answered with a task: {other.text}"
    assert error["code"] == INVALID_PARAMS and mid in error["message"], error
    assert mail_tasks(server, "alice") == before  # nothing ran

    # The same message again is a retry: its task, nothing run again.
    again = send(server, "alice", "first question", mid)
    assert again.json()["result"]["task"]["id"] == first.json()["result"]["task"]["id"]
    assert mail_tasks(server, "alice") == before


def test_a_reused_message_id_in_another_context_is_refused(server: ServerProcess) -> None:
    mid = f"m-{uuid.uuid4().hex[:8]}"
    first = send(server, "alice", "hello", mid)
    assert "result" in first.json(), first.text
    elsewhere = send(server, "alice", "hello", mid, context_id=str(uuid.uuid4()))
    assert elsewhere.json().get("error", {}).get("code") == INVALID_PARAMS, elsewhere.text


def test_a_reused_message_id_is_refused_on_the_streamed_send(server: ServerProcess) -> None:
    mid = f"m-{uuid.uuid4().hex[:8]}"
    assert "result" in send(server, "alice", "streamed one", mid).json()
    before = mail_tasks(server, "alice")
    streamed = send(server, "alice", "streamed two", mid, method="SendStreamingMessage")
    assert str(INVALID_PARAMS) in streamed.text and mid in streamed.text, streamed.text
    assert mail_tasks(server, "alice") == before


def test_another_callers_message_with_that_id_is_its_own(server: ServerProcess) -> None:
    mid = f"m-{uuid.uuid4().hex[:8]}"
    assert "result" in send(server, "alice", "alice's", mid).json()
    bobs = send(server, "bob", "bob's own", mid)
    assert "bob's own" in answer_of(bobs), bobs.text
