"""A message to a task that is still running, per `multitask_strategy`, over real HTTP.

A real `mail server` runs a supervisor that asks a slow worker (tests/support/
multitask_agents.py: a worker call waits as long as its request says, and every call is
logged). While the worker's call is under way a second message names the task:

- `reject` (the default): 409, the task goes on untouched;
- `enqueue`: each message waits, in order, until the task has answered the one before; the
  earlier work finishes (the worker's call ends);
- `interrupt`: the worker's call is cancelled (it never ends, and its request leaves no
  trace in the worker's history), the supervisor's finished turn is kept (it still has the
  first message), the earlier caller is told, the new message is answered at once;
- `rollback`: the earlier message's work is gone from the agents' histories and from the
  events the task shows; the task continues from before it.

The same runs through two front ends of a cluster deployment (the requests alternate between
them), when Ray and PostgreSQL are available.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.multitask_agents import swarms_json

from server_fixtures import (
    SingleServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
)

pytestmark = pytest.mark.timeout(400)

MAX_ENQUEUED = 3
# Loopback webhooks allowed: a message's own webhook is one more stored thing between its
# checks and its submission.
EXTRA = f"""
max_enqueued_messages_per_task = {MAX_ENQUEUED}

[server.webhooks]
allowed_hosts = ["127.0.0.1"]
"""


class Swarm:
    """A running deployment of the multitask agents, with alice's key and the calls log."""

    def __init__(self, server: Any, key: str, log: Path) -> None:
        self.server, self.key, self.log = server, key, log
        self.pool = concurrent.futures.ThreadPoolExecutor(4)

    @property
    def url(self) -> str:
        return str(self.server.base_url)

    def post(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        return httpx.post(
            f"{self.url}/message", json=body, headers={**auth(self.key), **headers}, timeout=120
        )

    def post_later(self, body: dict[str, Any]) -> concurrent.futures.Future[httpx.Response]:
        return self.pool.submit(self.post, body)

    def task(self, task_id: str) -> dict[str, Any]:
        r = httpx.get(
            f"{self.url}/task", params={"task_id": task_id}, headers=auth(self.key), timeout=60
        )
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_line(self, line: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines():
            assert time.monotonic() < deadline, f"no {line!r} in {self.lines()}"
            time.sleep(0.02)

    def wait_events(self, task_id: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        """The task's `multitask_strategy` events, once there are `count` of them."""
        deadline = time.monotonic() + timeout
        while True:
            found = multitask_events(self.task(task_id))
            if len(found) >= count:
                return found
            assert time.monotonic() < deadline, found
            time.sleep(0.05)


def events(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) of each event a task record shows."""
    shown = []
    for event in record["events"]:
        data = event["data"]
        shown.append((event["event"], json.loads(data) if isinstance(data, str) else data))
    return shown


def multitask_events(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [d["extra_data"] for name, d in events(record) if name == "multitask_strategy"]


def _single(root: Path) -> Iterator[Any]:
    port = free_port()
    config = write_config(root, port=port, swarm="multi", extra=EXTRA)
    env = {"MAIL_MULTITASK_LOG": str(root / "calls.log")}
    server = SingleServerProcess(root, port, args=["--config", str(config)], env=env).start()
    try:
        yield server
    finally:
        server.stop()


def _cluster(root: Path) -> Iterator[Any]:
    from tests.support.cluster_server import cluster_server_class
    from tests.test_cluster_local import _require

    _require()  # Ray and PostgreSQL, or skip (fail with MAIL_REQUIRE_*)
    port = free_port()
    config = write_config(root, port=port, swarm="multi", extra=EXTRA)
    env = {"MAIL_MULTITASK_LOG": str(root / "calls.log")}
    cls = cluster_server_class(SingleServerProcess)
    server = cls(root, port, args=["--config", str(config)], env=env).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=["single", "cluster"])
def swarm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Swarm]:
    root = tmp_path_factory.mktemp(f"multitask-{request.param}")
    (root / "swarms.json").write_text(json.dumps(swarms_json("multi")), encoding="utf-8")
    key = create_key(root / "registries" / "keys.json", "user", "alice")
    start = _single if request.param == "single" else _cluster
    for server in start(root):
        with_swarm = Swarm(server, key, root / "calls.log")
        yield with_swarm
        with_swarm.pool.shutdown(wait=False, cancel_futures=True)


def test_reject_is_the_default_and_leaves_the_task_alone(swarm: Swarm) -> None:
    task_id = str(uuid.uuid4())
    first = swarm.post_later({"body": "ASK SLOW 1 reject-one", "task_id": task_id})
    swarm.wait_line("worker start SLOW 1 reject-one")
    refused = swarm.post({"body": "COUNT", "task_id": task_id})
    assert refused.status_code == 409, refused.text
    assert "multitask_strategy" in refused.json()["detail"]
    named = swarm.post({"body": "COUNT", "task_id": task_id, "multitask_strategy": "reject"})
    assert named.status_code == 409, named.text
    answer = first.result(60)
    assert answer.json()["response"] == "done: worked: reject-one"
    assert multitask_events(swarm.task(task_id)) == []


def test_enqueue_delivers_each_message_after_the_answer_before_it(swarm: Swarm) -> None:
    task_id = str(uuid.uuid4())
    first = swarm.post_later({"body": "ASK SLOW 2 enqueue-one", "task_id": task_id})
    swarm.wait_line("worker start SLOW 2 enqueue-one")
    second = swarm.post_later(
        {"body": "COUNT", "task_id": task_id, "multitask_strategy": "enqueue"}
    )
    swarm.wait_events(task_id, 1)  # queued, first in line
    third = swarm.post_later({"body": "last", "task_id": task_id, "multitask_strategy": "enqueue"})

    answers = [f.result(60) for f in (first, second, third)]
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert [a.json()["response"] for a in answers] == [
        "done: worked: enqueue-one",
        "callers: ASK SLOW 2 enqueue-one | COUNT",  # the earlier message's work is all there
        "echo: last",
    ]
    assert "worker end SLOW 2 enqueue-one" in swarm.lines()  # nothing was cancelled

    # The order of deliveries: each enqueued message reaches the supervisor only after the
    # answer before it.
    order = []
    for name, data in events(swarm.task(task_id)):
        extra = data.get("extra_data") or {}
        if name == "multitask_strategy":
            order.append(f"{extra['action']}")
        elif name == "new_message" and extra["full_message"]["message"]["sender"][
            "address_type"
        ] in ("user", "admin"):
            order.append("message " + extra["full_message"]["message"]["body"])
        elif name == "task_complete":
            order.append("answer " + data["description"].removeprefix("response: "))
    assert order == [
        "message ASK SLOW 2 enqueue-one",
        "queued",
        "queued",
        "answer 'done: worked: enqueue-one'",
        "delivered",
        "message COUNT",
        "answer 'callers: ASK SLOW 2 enqueue-one | COUNT'",
        "delivered",
        "message last",
        "answer 'echo: last'",
    ], order
    positions = [e.get("position") for e in multitask_events(swarm.task(task_id))]
    assert positions == [1, 2, None, None]


def test_an_enqueued_message_outwaits_its_timeout_only_in_the_background(swarm: Swarm) -> None:
    """A background message was accepted (202): waiting behind the task's current work longer
    than its `timeout` does not drop it (the timeout counts from when it goes in). A caller
    waiting for the answer whose timeout passes first gets its message withdrawn, is told so
    (the task runs on, it did not fail), and the task's events record it."""
    task_id = str(uuid.uuid4())
    first = swarm.post({"body": "ASK SLOW 8 long-one", "task_id": task_id, "background": True})
    assert first.status_code == 202, first.text
    # Its Location (`GET /task/{task_id}`) reads the task, through any front end.
    where = httpx.get(swarm.url + first.headers["location"], headers=auth(swarm.key), timeout=60)
    assert where.status_code == 200 and where.json()["task_id"] == task_id, where.text
    swarm.wait_line("worker start SLOW 8 long-one")
    late = {"task_id": task_id, "multitask_strategy": "enqueue", "kwargs": {"timeout": 1}}
    accepted = swarm.post({**late, "body": "ASK queued-one", "background": True})
    assert accepted.status_code == 202, accepted.text
    withdrawn = swarm.post({**late, "body": "ASK waited-one"})
    assert withdrawn.status_code == 200, withdrawn.text
    assert withdrawn.json()["state"] == "running", withdrawn.text
    assert "withdrawn" in withdrawn.json()["response"]

    swarm.wait_line("worker start queued-one")  # the background message went in, late
    applied = swarm.wait_events(task_id, 4)
    assert [e["action"] for e in applied] == ["queued", "queued", "withdrawn", "delivered"]
    assert applied[2]["message_id"] == applied[1]["message_id"]  # the waiting caller's
    assert applied[3]["message_id"] == applied[0]["message_id"]  # the background one
    assert "worker start waited-one" not in swarm.lines()


def test_concurrent_enqueues_stay_within_the_bound(swarm: Swarm) -> None:
    """`max_enqueued_messages_per_task` holds for requests that arrive together, each with its
    own webhook (stored between the request's checks and its submission): past the bound
    they are 429, whatever the timing; requests refused (a webhook not allowed) take no
    place."""
    tasks = [str(uuid.uuid4()) for _ in range(3)]
    for n, task_id in enumerate(tasks):
        body = {"body": f"ASK SLOW 20 bound-{n}", "task_id": task_id, "background": True}
        assert swarm.post(body).status_code == 202
    for n in range(len(tasks)):
        swarm.wait_line(f"worker start SLOW 20 bound-{n}")
    for _ in range(MAX_ENQUEUED):  # refused after the bound's check: they take no place
        refused = {"url": "http://10.0.0.1/hook"}  # (a private address, not allowed)
        body = {"body": "COUNT", "task_id": tasks[0], "multitask_strategy": "enqueue"}
        assert swarm.post({**body, "webhook": refused}).status_code == 400
    pool = concurrent.futures.ThreadPoolExecutor(16)
    try:
        flood = [
            pool.submit(
                swarm.post,
                {
                    "body": f"COUNT {i}",
                    "task_id": task_id,
                    "multitask_strategy": "enqueue",
                    "background": True,
                    "webhook": {"url": "http://127.0.0.1:9/hook"},  # (nothing listens)
                },
            )
            for task_id in tasks
            for i in range(16)
        ]
        codes = [f.result(120).status_code for f in flood]
    finally:
        pool.shutdown()
    assert set(codes) == {202, 429}, codes
    for task_id in tasks:
        queued = [e for e in multitask_events(swarm.task(task_id)) if e["action"] == "queued"]
        assert len(queued) == MAX_ENQUEUED, queued
    assert codes.count(202) == MAX_ENQUEUED * len(tasks)
    for task_id in tasks:  # (the worker's 20 s are not waited for)
        swarm.post({"body": "COUNT", "task_id": task_id, "multitask_strategy": "rollback"})


def test_interrupt_cancels_the_turn_in_flight_and_keeps_finished_work(swarm: Swarm) -> None:
    task_id = str(uuid.uuid4())
    first = swarm.post_later({"body": "ASK SLOW 60 interrupt-one", "task_id": task_id})
    swarm.wait_line("worker start SLOW 60 interrupt-one")
    began = time.monotonic()
    second = swarm.post({"body": "COUNT", "task_id": task_id, "multitask_strategy": "interrupt"})
    assert second.status_code == 200, second.text
    assert time.monotonic() - began < 30  # not after the worker's 60 s
    # The supervisor's finished turn is kept: it still has the first message.
    assert second.json()["response"] == "callers: ASK SLOW 60 interrupt-one | COUNT"

    earlier = first.result(30).json()
    assert earlier["state"] == "running"  # the task went on with the newer message
    assert "interrupted" in earlier["response"]

    # The worker's call was cancelled: it never ended, and left no request behind.
    assert "worker end SLOW 60 interrupt-one" not in swarm.lines()
    again = swarm.post({"body": "ASK again", "task_id": task_id})
    assert again.json()["response"] == "done: worked: again (request 1)"

    applied = multitask_events(swarm.task(task_id))
    assert [(e["strategy"], e["action"], e["cancelled_turns"]) for e in applied] == [
        ("interrupt", "interrupted", ["worker"])
    ]


def test_rollback_takes_the_earlier_message_back(swarm: Swarm) -> None:
    task_id = str(uuid.uuid4())
    assert swarm.post({"body": "COUNT", "task_id": task_id}).json()["response"] == "callers: COUNT"
    accepted = swarm.post(
        {"body": "ASK SLOW 60 rollback-one", "task_id": task_id, "background": True}
    )
    assert accepted.status_code == 202, accepted.text
    swarm.wait_line("worker start SLOW 60 rollback-one")
    before = swarm.task(task_id)
    shown_before = [e["id"] for e in before["events"]]

    second = swarm.post({"body": "COUNT", "task_id": task_id, "multitask_strategy": "rollback"})
    assert second.status_code == 200, second.text
    # The supervisor's history went back to before the earlier message.
    assert second.json()["response"] == "callers: COUNT | COUNT"
    assert "worker end SLOW 60 rollback-one" not in swarm.lines()
    again = swarm.post({"body": "ASK again", "task_id": task_id})
    assert again.json()["response"] == "done: worked: again (request 1)"

    record = swarm.task(task_id)
    assert "rollback-one" not in json.dumps(record["events"])  # its events are not shown
    (applied,) = multitask_events(record)
    assert applied["strategy"] == "rollback" and applied["cancelled_turns"] == ["worker"]
    span = applied["rolled_back_events"]
    hidden = set(range(int(span["first"]), int(span["last"]) + 1))
    assert hidden and hidden <= {int(i) for i in shown_before}
    ids = [int(e["id"]) for e in record["events"]]
    assert not hidden & set(ids) and ids == sorted(ids)

    # A subscriber replaying the task from its start gets the same events.
    replayed = []
    with httpx.stream(
        "GET",
        f"{swarm.url}/task/events",
        params={"task_id": task_id},
        headers=auth(swarm.key),
        timeout=60,
    ) as response:
        for event in parse_sse_stream(response):
            if event.id is None:
                break
            replayed.append(int(event.id))
    assert replayed == ids


def test_a_rollback_after_a_kill_9_goes_back_to_the_stored_point(tmp_path: Path) -> None:
    """Where a rollback goes back to is stored with the task: after a kill -9 in the middle of
    a message's work, the restarted server continues that work, and a rollback still goes
    back to before that message."""
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json("multi")), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    log = tmp_path / "calls.log"

    def start() -> Any:
        port = free_port()
        config = write_config(tmp_path, port=port, swarm="multi")
        env = {"MAIL_MULTITASK_LOG": str(log)}
        return SingleServerProcess(tmp_path, port, args=["--config", str(config)], env=env).start()

    swarm = Swarm(start(), key, log)
    try:
        task_id = str(uuid.uuid4())
        assert swarm.post({"body": "COUNT", "task_id": task_id}).json()["response"] == (
            "callers: COUNT"
        )
        body = {"body": "ASK SLOW 60 before-kill", "task_id": task_id, "background": True}
        assert swarm.post(body).status_code == 202
        swarm.wait_line("worker start SLOW 60 before-kill")
        swarm.server.proc.kill()  # kill -9 while the worker works
        swarm.server.proc.wait(10)
        swarm.server = start()
        assert swarm.task(task_id)["state"] == "running"  # loaded: the work goes on
        deadline = time.monotonic() + 60
        while swarm.lines().count("worker start SLOW 60 before-kill") < 2:
            assert time.monotonic() < deadline, swarm.lines()
            time.sleep(0.05)
        second = swarm.post({"body": "COUNT", "task_id": task_id, "multitask_strategy": "rollback"})
        assert second.status_code == 200, second.text
        assert second.json()["response"] == "callers: COUNT | COUNT"
        assert "before-kill" not in json.dumps(swarm.task(task_id)["events"])
    finally:
        swarm.pool.shutdown(wait=False, cancel_futures=True)
        swarm.server.stop()
