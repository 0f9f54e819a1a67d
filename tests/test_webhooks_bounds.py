"""What one caller can queue is bounded, and refusals say why with one status per kind of
error: a real `mail server` (SQLite, the default) with small bounds, and a real receiver.

- A message's own ``webhook`` is one per task and URL: 40 messages to one task naming one
  URL deliver each event there once (they made 820 deliveries), and the messages of a task
  name at most ``max_request_webhooks_per_task`` URLs, a caller at most
  ``max_request_webhooks_per_caller`` webhooks of messages;
- ``POST /webhooks/{id}/test`` and ``/retry`` obey ``max_pending_deliveries`` (5,000 tests
  left 4,997 waiting on one webhook, limit 1,000), and a caller's deliveries waiting in all
  are bounded by ``max_pending_deliveries_per_caller``;
- a URL the sending client cannot parse (``http://127.0.0.1\\@8.8.8.8/``) is refused when it
  is set (it was accepted and retried for a day), a refused URL is a 400 like an unknown
  event type (it was a 422), and a failed connection says what failed (not ``ssl:default``).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import ServerProcess, auth, free_port, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [600]
max_pending_deliveries = 5
max_pending_deliveries_per_caller = 8
max_request_webhooks_per_caller = 6
max_request_webhooks_per_task = 3
"""
USERS = {name: ("user", name) for name in ("tess", "pat", "quinn", "rita", "uma", "vic")}


class Setup:
    def __init__(self, server: ServerProcess, receiver: ReceiverProcess) -> None:
        self.server, self.receiver = server, receiver
        self.closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: attempts fail

    def call(self, who: str, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(
            method,
            self.server.base_url + path,
            json=body,
            headers=auth(self.server.keys[who]),
            timeout=60,
        )

    def message(self, who: str, body: str, **extra: Any) -> dict[str, Any]:
        r = self.call(who, "POST", "/message", {"body": body, **extra})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def subscribe(self, who: str, url: str, events: list[str] | None = None) -> str:
        r = self.call(who, "POST", "/webhooks", {"url": url, "events": events or ["*"]})
        assert r.status_code == 201, r.text
        return r.json()["id"]  # type: ignore[no-any-return]

    def deliveries(self, who: str, hook: str, status: str = "") -> list[dict[str, Any]]:
        query = f"?status={status}" if status else ""
        r = self.call(who, "GET", f"/webhooks/{hook}/deliveries{query}")
        assert r.status_code == 200, r.text
        return r.json()["deliveries"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("webhook_bounds")
    receiver = ReceiverProcess(free_port(), root).start()
    try:
        with keyed_stub_server(root, USERS, extra=WEBHOOKS) as server:
            yield Setup(server, receiver)
    finally:
        receiver.stop()


def test_a_tasks_events_go_once_to_each_url(setup: Setup) -> None:
    url = setup.receiver.url("/tess")
    first = setup.message("tess", "turn 0", webhook={"url": url})
    task_id, hook = first["task_id"], first["webhook"]
    for turn in range(1, 40):
        again = setup.message("tess", f"turn {turn}", task_id=task_id, webhook={"url": url})
        assert again["webhook"] == hook  # the same webhook (its secret, shown to its owner)
    got = setup.receiver.wait_for(40, "/tess")
    time.sleep(1.0)  # (duplicates, if any, come with the last ones)
    got = setup.receiver.received("/tess")
    events = [ReceiverProcess.payload(g)["data"]["event_id"] for g in got]
    assert len(events) == len(set(events)) >= 40, len(events)
    from standardwebhooks.webhooks import Webhook

    for entry in got:  # all signed with the one secret (some came before the first answer)
        Webhook(hook["secret"]).verify(entry["body"], entry["headers"])


def test_spellings_of_one_url_are_one_webhook_of_a_task(setup: Setup) -> None:
    """The sender sends to the same place whatever the case of the scheme, a percent-encoded
    unreserved character, dot segments, a fragment or a port with a leading zero: one URL,
    so one webhook of the task and each event once (each spelling was a webhook of its own,
    and a delivery of every event, up to the per-task bound)."""
    url = setup.receiver.url("/vic")
    first = setup.message("vic", "turn 0", webhook={"url": url})
    task_id, hook = first["task_id"], first["webhook"]
    port = setup.receiver.port
    spellings = [
        f"HTTP://127.0.0.1:{port}/vic",
        f"http://127.0.0.1:{port}/%76ic",
        f"http://127.0.0.1:{port}/x/../vic",
        f"http://127.0.0.1:{port}/vic#again",
        f"http://127.0.0.1:0{port}/vic",
    ]
    for turn, spelling in enumerate(spellings, 1):
        again = setup.message("vic", f"turn {turn}", task_id=task_id, webhook={"url": spelling})
        assert again["webhook"]["id"] == hook["id"], spelling
    assert [h["url"] for h in _request_hooks(setup, "vic")] == [url]
    setup.receiver.wait_for(len(spellings) + 1, "/vic")
    time.sleep(1.0)  # (duplicates, if any, come with the last ones)
    events = [
        ReceiverProcess.payload(g)["data"]["event_id"] for g in setup.receiver.received("/vic")
    ]
    assert len(events) == len(set(events)) == len(spellings) + 1, events


def test_message_webhooks_are_bounded_per_task_and_per_caller(setup: Setup) -> None:
    first = setup.message("pat", "a", webhook={"url": setup.receiver.url("/p0")})
    task_id = first["task_id"]
    for n in (1, 2):
        setup.message(
            "pat", f"b{n}", task_id=task_id, webhook={"url": setup.receiver.url(f"/p{n}")}
        )
    body = {"body": "c", "task_id": task_id, "webhook": {"url": setup.receiver.url("/p3")}}
    r = setup.call("pat", "POST", "/message", body)
    assert r.status_code == 429 and "max_request_webhooks_per_task" in r.json()["detail"], r.text
    # A URL the task has already is its webhook again, not one more.
    again = setup.message("pat", "d", task_id=task_id, webhook={"url": setup.receiver.url("/p1")})
    assert again["webhook"]["id"] in {h["id"] for h in _request_hooks(setup, "pat")}
    assert len(_request_hooks(setup, "pat")) == 3
    # Per caller: three more tasks' webhooks make six; the seventh starts no task.
    for n in range(3):
        setup.message("pat", f"new {n}", webhook={"url": setup.receiver.url(f"/n{n}")})
    r = setup.call(
        "pat", "POST", "/message", {"body": "x", "webhook": {"url": setup.receiver.url("/n9")}}
    )
    assert r.status_code == 429 and "max_request_webhooks_per_caller" in r.json()["detail"], r.text
    assert len(_request_hooks(setup, "pat")) == 6


def _request_hooks(setup: Setup, who: str) -> list[dict[str, Any]]:
    hooks = setup.call(who, "GET", "/webhooks").json()["webhooks"]
    return [h for h in hooks if h["kind"] == "request"]


def _at_once(work: Any, times: int) -> list[httpx.Response]:
    with concurrent.futures.ThreadPoolExecutor(times) as pool:
        return list(pool.map(lambda _: work(), range(times)))


def test_tests_and_retries_obey_the_pending_bound(setup: Setup) -> None:
    setup.receiver.script("/refuses", [400])
    hook = setup.subscribe("quinn", setup.receiver.url("/refuses"))
    r = setup.call("quinn", "POST", f"/webhooks/{hook}/test")
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 20
    while not (failed := setup.deliveries("quinn", hook, "failed")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Now nothing answers: every test waits (the next attempt is in 10 minutes).
    r = setup.call("quinn", "PATCH", f"/webhooks/{hook}", {"url": f"{setup.closed}/q"})
    assert r.status_code == 200, r.text
    answers = _at_once(lambda: setup.call("quinn", "POST", f"/webhooks/{hook}/test"), 20)
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [202] * 5 + [429] * 15, statuses
    refused = next(a for a in answers if a.status_code == 429)
    assert "max_pending_deliveries" in refused.json()["detail"]
    assert len(setup.deliveries("quinn", hook, "pending")) == 5
    r = setup.call("quinn", "POST", f"/webhooks/{hook}/deliveries/{failed[0]['id']}/retry")
    assert r.status_code == 429 and "max_pending_deliveries" in r.json()["detail"], r.text
    assert len(setup.deliveries("quinn", hook, "pending")) == 5


def test_a_callers_waiting_deliveries_are_bounded_in_all(setup: Setup) -> None:
    first = setup.subscribe("rita", f"{setup.closed}/r1", ["task.failed"])
    second = setup.subscribe("rita", f"{setup.closed}/r2")
    for _ in range(5):
        assert setup.call("rita", "POST", f"/webhooks/{first}/test").status_code == 202
    answers = [setup.call("rita", "POST", f"/webhooks/{second}/test") for _ in range(4)]
    assert [a.status_code for a in answers] == [202, 202, 202, 429], [a.text for a in answers]
    assert "max_pending_deliveries_per_caller" in answers[-1].json()["detail"]
    # An event past the bound is recorded failed, saying why (listed once the answer is out).
    task = setup.message("rita", "one more")
    failed = setup.deliveries("rita", second, "failed")
    assert [d["task_id"] for d in failed] == [task["task_id"]], failed
    assert "max_pending_deliveries_per_caller" in failed[0]["last_error"]


def test_refusals_are_400_with_the_reason(setup: Setup) -> None:
    for url, says in (
        ("http://127.0.0.1\\@8.8.8.8/", "not a valid URL"),  # the sender's parser refuses it
        ("http://xn--localhost-/hook", "not a valid URL"),  # a name IDNA cannot read (a 500)
        ("http://10.9.9.9/hook", "allowed_hosts"),  # the guard refuses it
        ("ftp://127.0.0.1/hook", "http:// or https://"),
    ):
        r = setup.call("uma", "POST", "/webhooks", {"url": url, "events": ["*"]})
        assert r.status_code == 400 and says in r.json()["detail"], (url, r.text)
        r = setup.call("uma", "POST", "/message", {"body": "x", "webhook": {"url": url}})
        assert r.status_code == 400 and "webhook.url" in r.json()["detail"], (url, r.text)
    r = setup.call(
        "uma", "POST", "/webhooks", {"url": setup.receiver.url("/u"), "events": ["nope"]}
    )
    assert r.status_code == 400 and "unknown event type" in r.json()["detail"], r.text
    assert setup.call("uma", "GET", "/webhooks").json()["webhooks"] == []


def test_a_failed_connection_says_what_failed(setup: Setup) -> None:
    port = setup.closed.rsplit(":", 1)[1]
    hook = setup.subscribe("uma", f"{setup.closed}/u")
    assert setup.call("uma", "POST", f"/webhooks/{hook}/test").status_code == 202
    deadline = time.monotonic() + 20
    while not (tried := [d for d in setup.deliveries("uma", hook) if d["attempts"]]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    error = tried[0]["attempts_log"][0]["error"]
    assert error == f"cannot connect to 127.0.0.1:{port}: Connection refused", error
    assert "ssl" not in tried[0]["last_error"]
