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


# -- the ids a caller chooses are bounded -------------------------------------------------
# Each messageId is remembered per caller (the newest `max_a2a_tasks_per_caller` of them):
# one of ~4 MB (the body limit) was kept whole, so 40 sends held 250 MB for good.

ID_LIMIT = 1024  # mail.a2a.bridge.MAX_A2A_ID_CHARS (docs/a2a.md, limits)


def rest_send(server: ServerProcess, who: str, msg: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/a2a/message:send",
        json={"message": msg},
        headers={**auth(server.keys[who]), "A2A-Version": "1.0"},
        timeout=60,
    )


@pytest.mark.parametrize("field", ["messageId", "contextId", "taskId"])
def test_an_id_over_the_limit_is_refused_on_both_bindings(
    server: ServerProcess, field: str
) -> None:
    before = mail_tasks(server, "alice")
    msg: dict[str, Any] = {"role": "ROLE_USER", "messageId": f"m-{uuid.uuid4()}"}
    msg["parts"] = [{"text": "too long"}]
    msg[field] = "x" * (ID_LIMIT + 1)
    said = f"{field} is {ID_LIMIT + 1} characters; the limit is {ID_LIMIT}"

    rpc = httpx.post(
        f"{server.base_url}/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}},
        headers={**auth(server.keys["alice"]), "A2A-Version": "1.0"},
        timeout=60,
    )
    error = rpc.json().get("error")
    assert error is not None and error["code"] == INVALID_PARAMS, rpc.text
    assert said in error["message"], error

    rest = rest_send(server, "alice", msg)
    assert rest.status_code == 400, rest.text
    assert rest.json()["error"]["status"] == "INVALID_ARGUMENT", rest.text
    assert said in rest.json()["error"]["message"], rest.text
    assert mail_tasks(server, "alice") == before  # nothing ran


def test_an_id_at_the_limit_is_taken(server: ServerProcess) -> None:
    mid = uuid.uuid4().hex + "m" * (ID_LIMIT - 32)
    first = send(server, "alice", "a long id", mid, context_id="c" * ID_LIMIT)
    assert "a long id" in answer_of(first), first.text
    again = send(server, "alice", "a long id", mid, context_id="c" * ID_LIMIT)
    assert again.json()["result"]["task"]["id"] == first.json()["result"]["task"]["id"]


def test_huge_message_ids_do_not_pin_the_servers_memory(server: ServerProcess) -> None:
    """Refused, a request still stayed in memory until a full collection (rare in the server:
    the SDK's tracing keeps its error in a reference cycle through the request's frames): the
    bridge collects such young cycles after a big request, so refused ones are let go too."""
    huge = 3 * 1024 * 1024  # under the 4 MiB body limit
    for n in range(3):  # the path's own high-water mark: big requests are parsed in memory
        send(server, "bob", "warm", f"{n}-" + "w" * huge)
    before = server.rss_kib() / 1024
    for n in range(20):  # 60 MB of ids
        refused = send(server, "bob", "big id", f"{n}-" + "i" * huge)
        assert refused.json()["error"]["code"] == INVALID_PARAMS, refused.text[:200]
        role = {
            "role": "ROLE_AGENT",
            "messageId": f"r-{uuid.uuid4()}",
            "parts": [{"text": "t" * huge}],
        }
        refused = rest_send(server, "bob", role)  # refused by the SDK's own handling
        assert refused.status_code == 400, refused.text[:200]
    grown = server.rss_kib() / 1024 - before
    assert grown < 40, f"the server holds {grown:.0f} MB more after 40 refused 3 MB requests"
