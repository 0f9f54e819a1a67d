"""``Idempotency-Key`` on ``POST /message`` of a real `mail server` whose agent is a LiteLLM
agent answered by the scripted model server, which counts the model calls.

A client sends a keyed message and drops its connection before the answer (the model is
still thinking); it sends the same request with the same key again and gets the one task's
answer, plain or streamed, and the model was called once. Two concurrent requests with one
key run one task; the key with another body is a 422; another caller's identical key starts
that caller's own task.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import (
    ServerProcess,
    auth,
    parse_sse_stream,
)
from support.llm_thread import ThreadedLLM, mentions
from support.review_server import review_server
from support.scripted_llm import hang, reply, tool_call

pytestmark = pytest.mark.timeout(600)

USERS = ("plain", "stream", "race", "first", "second")
THINKING = 1.5  # seconds the model takes to answer: the window in which the client drops


@pytest.fixture(scope="module")
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


@pytest.fixture(scope="module")
def server(llm: ThreadedLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("idem_http")
    with review_server(directory, llm.base_url, USERS, prefix="idem") as srv:
        yield srv


def answer_for(llm: ThreadedLLM, token: str, *, times: int = 1) -> str:
    """Queue `times` slow answers for messages that mention `token`; returns the answer."""
    text = f"answer {token}"
    for _ in range(times):
        llm.queue(
            hang(THINKING, then=reply(tool_call("task_complete", {"finish_message": text}))),
            match=lambda r: mentions(r, token),
        )
    return text


def new_key() -> str:
    return f'"{uuid.uuid4()}"'


def headers(server: ServerProcess, user: str, key: str) -> dict[str, str]:
    return {**auth(server.keys[user]), "Idempotency-Key": key}


def wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def send_and_drop(
    server: ServerProcess,
    user: str,
    key: str,
    payload: dict[str, Any],
    llm: ThreadedLLM,
    token: str,
) -> None:
    """Send the request on a raw connection and close it once the model got the call (the
    server is working on it, the client has no answer)."""
    body = json.dumps(payload).encode()
    head = (
        f"POST /message HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.keys[user]}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(head + body)
        wait_for(lambda: llm.requests(token), "the model call")
    # The connection is closed: the task runs on, nobody waits for its answer.


def retry_until_answer(
    server: ServerProcess, user: str, key: str, payload: dict[str, Any], timeout: float = 60
) -> tuple[httpx.Response, int]:
    """POST until the answer is not a 409 "still working"; (the answer, how many 409s)."""
    busy = 0
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.post(
            f"{server.base_url}/message",
            json=payload,
            headers=headers(server, user, key),
            timeout=60,
        )
        if r.status_code != 409 or "retry-after" not in r.headers:
            return r, busy
        assert time.monotonic() < deadline, r.text
        busy += 1
        time.sleep(float(r.headers["retry-after"]) / 4)


def tasks_of(server: ServerProcess, user: str) -> dict[str, Any]:
    r = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[user]), timeout=30)
    assert r.status_code == 200, r.text
    tasks: dict[str, Any] = r.json()
    return tasks


def test_dropped_plain_request_retried_with_its_key_runs_once(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    token = uuid.uuid4().hex
    answer = answer_for(llm, token)
    key, payload = new_key(), {"body": f"question {token}"}
    send_and_drop(server, "plain", key, payload, llm, token)
    r, busy = retry_until_answer(server, "plain", key, payload)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == answer
    assert busy >= 1  # the retry came while the model was still thinking: told to wait
    assert r.headers.get("idempotent-replayed") == "true"
    assert len(llm.requests(token)) == 1
    tasks = tasks_of(server, "plain")
    assert list(tasks) == [r.json()["task_id"]]
    # Once more, later: the stored outcome, byte for byte; still one model call.
    again = httpx.post(
        f"{server.base_url}/message",
        json=payload,
        headers=headers(server, "plain", key),
        timeout=30,
    )
    assert again.status_code == 200 and again.content == r.content
    assert len(llm.requests(token)) == 1
    # The same key with another body is refused, and runs nothing.
    other = httpx.post(
        f"{server.base_url}/message",
        json={"body": f"something else {token}"},
        headers=headers(server, "plain", key),
        timeout=30,
    )
    assert other.status_code == 422, other.text
    assert "different request" in other.json()["detail"]
    assert len(tasks_of(server, "plain")) == 1


def test_dropped_stream_retried_with_its_key_attaches_to_the_task(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    token = uuid.uuid4().hex
    answer = answer_for(llm, token)
    key, payload = new_key(), {"body": f"question {token}", "stream": True}
    send_and_drop(server, "stream", key, payload, llm, token)
    events = []
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json=payload,
        headers=headers(server, "stream", key),
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["idempotent-replayed"] == "true"
        for event in parse_sse_stream(response):
            if event.event == "ping":
                continue
            events.append(event)
            if event.event in ("task_complete", "task_error") and event.id is None:
                break
    assert events[-1].event == "task_complete", [e.event for e in events]
    assert events[-1].json()["response"] == answer
    ids = [int(e.id) for e in events if e.id is not None]
    assert ids[0] == 1 and ids == list(range(1, len(ids) + 1))  # from the first event on
    assert len(llm.requests(token)) == 1
    (task_id,) = tasks_of(server, "stream")
    assert events[-1].json()["task_id"] == task_id
    # With Last-Event-ID the retry continues after the events the client already has.
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json=payload,
        headers={**headers(server, "stream", key), "Last-Event-ID": "2"},
        timeout=60,
    ) as response:
        later = [e for e in parse_sse_stream(response) if e.event != "ping"]
    assert [int(e.id) for e in later if e.id is not None][0] == 3
    assert later[-1].json()["response"] == answer
    assert len(llm.requests(token)) == 1


def test_concurrent_requests_with_one_key_run_one_task(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    token = uuid.uuid4().hex
    answer = answer_for(llm, token)
    key, payload = new_key(), {"body": f"question {token}"}
    answers: dict[int, tuple[httpx.Response, int]] = {}
    start = threading.Barrier(3)

    def send(number: int) -> None:
        start.wait()
        answers[number] = retry_until_answer(server, "race", key, payload)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    bodies = {r.json()["response"] for r, _ in answers.values()}
    assert bodies == {answer}
    assert len({r.json()["task_id"] for r, _ in answers.values()}) == 1
    assert sum(busy for _, busy in answers.values()) >= 2  # the others were told to wait
    assert len(llm.requests(token)) == 1
    assert len(tasks_of(server, "race")) == 1


def test_the_same_key_of_another_caller_is_another_key(
    server: ServerProcess, llm: ThreadedLLM
) -> None:
    token = uuid.uuid4().hex
    answer = answer_for(llm, token, times=2)
    key, payload = new_key(), {"body": f"question {token}"}
    first, _ = retry_until_answer(server, "first", key, payload)
    second, _ = retry_until_answer(server, "second", key, payload)
    assert first.status_code == second.status_code == 200
    assert first.json()["response"] == second.json()["response"] == answer
    assert first.json()["task_id"] != second.json()["task_id"]
    assert "idempotent-replayed" not in second.headers
    assert len(llm.requests(token)) == 2  # each caller's own task
    assert list(tasks_of(server, "second")) == [second.json()["task_id"]]


def test_requests_without_a_key_are_unchanged(server: ServerProcess, llm: ThreadedLLM) -> None:
    token = uuid.uuid4().hex
    answer_for(llm, token, times=2)
    payload = {"body": f"question {token}"}
    for _ in range(2):
        r = httpx.post(
            f"{server.base_url}/message",
            json=payload,
            headers=auth(server.keys["first"]),
            timeout=60,
        )
        assert r.status_code == 200, r.text
    assert len(llm.requests(token)) == 2
