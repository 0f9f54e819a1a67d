"""Repeats of a keyed ``POST /message`` (same ``Idempotency-Key``) in the cases a new user and
an attacker found answered wrong, against a real `mail server` on its default SQLite file
(stub agents, no model):

- a message that continues a task with a webhook of its own, streamed: its repeat named the
  webhook of the task's *first* message (another id and secret) in ``MAIL-Webhook-Id`` /
  ``MAIL-Webhook-Secret``, so deliveries could not be verified with what the repeat said;
- a streamed message to a task that later messages continued: its repeat replayed their
  events too and closed with the *latest* answer, not its own (a plain repeat gets its own);
- a streamed message whose task was since removed (``finished_task_ttl``): its repeat was told
  409 "still being processed, retry after 1 s" on every try until the key expired (24 h), so a
  retrying client (``MAILClient``) waited its whole timeout for an answer that never comes;
- ``MAILClient(retries=...)`` took 101 and more (``[client] retries`` stops at 100), ``True``
  and ``2.5``, and failed on ``"3"`` with a bare ``TypeError`` about ``<``.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from mail.client import MAILClient
from server_fixtures import ServerProcess, auth, keyed_stub_server, parse_sse_stream

pytestmark = pytest.mark.timeout(180)

WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
"""

RETENTION = """
[server.store]
finished_task_ttl = 1
prune_interval = 0.2
"""


def _stream(
    server: ServerProcess, payload: dict[str, Any], key: str
) -> tuple[httpx.Response, list[Any]]:
    """A keyed streamed POST /message read to its closing event (or its error answer)."""
    headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{key}"'}
    body = {**payload, "stream": True}
    events: list[Any] = []
    with httpx.stream(
        "POST", f"{server.base_url}/message", json=body, headers=headers, timeout=60
    ) as response:
        if response.status_code != 200:
            response.read()
            return response, events
        for event in parse_sse_stream(response):
            if event.event != "ping":
                events.append(event)
            if event.event in ("task_complete", "task_error") and event.id is None:
                break
    return response, events


def _wait_removed(server: ServerProcess, task_id: str) -> None:
    """Until retention removed the task (about 1 s after it ended)."""
    headers = auth(server.keys["alice"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = httpx.get(f"{server.base_url}/task", params={"task_id": task_id}, headers=headers)
        if got.status_code == 404:
            return
        time.sleep(0.2)
    raise AssertionError(f"task {task_id} was not removed by retention")


def _named(response: httpx.Response) -> tuple[str | None, str | None]:
    return response.headers.get("mail-webhook-id"), response.headers.get("mail-webhook-secret")


def test_a_continuations_streamed_repeat_names_its_own_webhook(tmp_path: Path) -> None:
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}, extra=WEBHOOKS) as server:
        first_key, second_key = str(uuid.uuid4()), str(uuid.uuid4())
        first_body = {"body": "first", "webhook": {"url": "http://127.0.0.1:9/first"}}
        first, events = _stream(server, first_body, first_key)
        assert first.status_code == 200 and events
        task_id = events[-1].json()["task_id"]
        second_body = {
            "body": "second",
            "task_id": task_id,
            "webhook": {"url": "http://127.0.0.1:9/second"},
        }
        second, _ = _stream(server, second_body, second_key)
        assert second.status_code == 200
        assert _named(second)[0] not in (None, _named(first)[0])

        again, events = _stream(server, second_body, second_key)
        assert again.headers.get("idempotent-replayed") == "true"
        assert events[-1].json()["response"] == "echo[alice]: second"
        assert _named(again) == _named(second)  # its own webhook, not the first message's
        first_again, _ = _stream(server, first_body, first_key)
        assert _named(first_again) == _named(first)


def test_a_streamed_repeat_of_a_removed_task_is_answered_not_told_to_wait(
    tmp_path: Path,
) -> None:
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}, extra=RETENTION) as server:
        key = str(uuid.uuid4())
        first, events = _stream(server, {"body": "kept a while"}, key)
        assert first.status_code == 200
        task_id = events[-1].json()["task_id"]
        headers = auth(server.keys["alice"])
        _wait_removed(server, task_id)

        again, events = _stream(server, {"body": "kept a while"}, key)
        assert again.status_code == 404, again.text  # not 409 + Retry-After: 1 for 24 h
        assert "retry-after" not in again.headers
        assert task_id in again.json()["detail"] and "finished_task_ttl" in again.json()["detail"]
        assert events == []
        # And the message did not run a second time.
        listed = httpx.get(f"{server.base_url}/tasks", headers=headers, timeout=30).json()
        assert listed == {}


def test_a_streamed_repeat_ends_with_its_own_answer_when_the_task_went_on(
    tmp_path: Path,
) -> None:
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}) as server:
        first_key = str(uuid.uuid4())
        first, events = _stream(server, {"body": "one"}, first_key)
        assert first.status_code == 200
        task_id = events[-1].json()["task_id"]
        own = [e.id for e in events if e.id is not None]
        assert events[-1].json()["response"] == "echo[alice]: one"
        second, _ = _stream(server, {"body": "two", "task_id": task_id}, str(uuid.uuid4()))
        assert second.status_code == 200
        headers = {**auth(server.keys["alice"]), "Idempotency-Key": str(uuid.uuid4())}
        plain = httpx.post(
            f"{server.base_url}/message",
            json={"body": "three", "task_id": task_id},
            headers=headers,
            timeout=60,
        )
        assert plain.json()["response"] == "echo[alice]: three"

        again, events = _stream(server, {"body": "one"}, first_key)
        assert again.headers.get("idempotent-replayed") == "true"
        assert [e.id for e in events if e.id is not None] == own  # its events, no later ones
        assert [e.event for e in events].count("task_complete") == 1
        assert events[-1].json()["response"] == "echo[alice]: one"
        # From a Last-Event-ID inside its events: the rest of them, then its answer.
        headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{first_key}"'}
        headers["Last-Event-ID"] = own[1]
        with httpx.stream(
            "POST",
            f"{server.base_url}/message",
            json={"body": "one", "stream": True},
            headers=headers,
            timeout=60,
        ) as response:
            rest = [e for e in parse_sse_stream(response) if e.event != "ping"]
        assert [e.id for e in rest if e.id is not None] == own[2:]
        assert rest[-1].json()["response"] == "echo[alice]: one"


@pytest.mark.parametrize("retries", [-1, 101, True, 2.5, "3"])
def test_client_retries_must_be_a_whole_number_from_0_to_100(retries: Any) -> None:
    with pytest.raises(ValueError, match="retries must be a whole number from 0 to 100"):
        MAILClient("http://127.0.0.1:9", retries=retries)
    for fine in (0, 100):
        assert MAILClient("http://127.0.0.1:9", retries=fine).retries == fine


def test_a_plain_repeat_of_a_removed_task_does_not_run_the_message_again(
    tmp_path: Path,
) -> None:
    """On SQLite a plain keyed answer of a completed task stores no outcome of its own (the
    key and the task are it); retention removing the task must leave the key answered."""
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}, extra=RETENTION) as server:
        key = str(uuid.uuid4())
        headers = {**auth(server.keys["alice"]), "Idempotency-Key": f'"{key}"'}
        url = f"{server.base_url}/message"
        first = httpx.post(url, json={"body": "kept a while"}, headers=headers, timeout=60)
        assert first.status_code == 200, first.text
        task_id = first.json()["task_id"]
        plain = auth(server.keys["alice"])
        _wait_removed(server, task_id)

        again = httpx.post(url, json={"body": "kept a while"}, headers=headers, timeout=60)
        assert again.status_code == 404, again.text
        assert task_id in again.json()["detail"]
        listed = httpx.get(f"{server.base_url}/tasks", headers=plain, timeout=30).json()
        assert listed == {}  # the message did not run a second time
