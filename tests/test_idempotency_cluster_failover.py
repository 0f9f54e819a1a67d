"""Cluster mode, tried by hand and kept: one Idempotency-Key across two front ends.

- two requests with one key sent at the same moment, one to each front end, run one task: one
  of them gets the answer, the other a 409 with Retry-After (or the same answer replayed);
- the front end that took a key is killed (SIGKILL) while the task runs; the retry through the
  other front end gets the task's answer and the agents ran once.

Real Ray cluster (a head and one worker), ``uv run mail server --cluster ray`` front ends,
PostgreSQL; the agents log each call (``tests/support/durable_agents.py``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from tests.support.keyed_cluster import EXPECTED, calls, two_front_ends
from tests.support.ray_cluster import ClusterDeployment, auth_header
from tests.test_cluster_ray import _require

from server_fixtures import parse_sse_stream

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDeployment]:
    _require()
    with two_front_ends(tmp_path_factory.mktemp("idem-failover"), latency_ms=1500) as dep:
        yield dep


def _retry_until_done(url: str, payload: dict[str, str], headers: dict[str, str]) -> httpx.Response:
    deadline = time.monotonic() + 240
    while True:
        r = httpx.post(url, json=payload, headers=headers, timeout=240)
        if r.status_code not in (409, 503) or "retry-after" not in r.headers:
            return r
        assert time.monotonic() < deadline, r.text
        time.sleep(0.3)


def test_concurrent_duplicates_across_front_ends_run_one_task(
    deployment: ClusterDeployment,
) -> None:
    urls = [f"{f.base_url}/message" for f in deployment.front_ends[:2]]
    key = deployment.keys["bob"]
    headers = {**auth_header(key), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    text = f"dup-{uuid.uuid4().hex[:6]}"
    payload = {"body": f"FANOUT {text}"}
    before = (calls(deployment.root, "worker1"), calls(deployment.root, "worker2"))
    answers: list[httpx.Response] = [None, None]  # type: ignore[list-item]
    go = threading.Barrier(2)

    def send(index: int) -> None:
        go.wait()
        answers[index] = httpx.post(urls[index], json=payload, headers=headers, timeout=240)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    statuses = sorted(a.status_code for a in answers)
    assert statuses in ([200, 409], [200, 200]), [a.text for a in answers]
    done = next(a for a in answers if a.status_code == 200)
    assert done.json()["response"] == EXPECTED.format(text), done.text
    for a in answers:
        if a.status_code == 409:
            assert "retry-after" in a.headers
        else:
            assert a.content == done.content
    final = _retry_until_done(urls[1], payload, headers)
    assert final.status_code == 200 and final.content == done.content
    tasks = httpx.get(
        f"{deployment.front_ends[0].base_url}/tasks", headers=auth_header(key), timeout=60
    )
    assert list(tasks.json()) == [done.json()["task_id"]]
    after = (calls(deployment.root, "worker1"), calls(deployment.root, "worker2"))
    assert after == (before[0] + 1, before[1] + 1)


def test_front_end_killed_while_its_keyed_task_runs(deployment: ClusterDeployment) -> None:
    victim = deployment.start_front_end()  # a third one, killed here
    survivor = deployment.front_ends[0]
    key = deployment.keys["alice"]
    headers = {**auth_header(key), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    text = f"kill-{uuid.uuid4().hex[:6]}"
    payload = {"body": f"FANOUT {text}"}
    before = calls(deployment.root, "supervisor")
    workers = (calls(deployment.root, "worker1"), calls(deployment.root, "worker2"))
    errors: list[BaseException] = []

    def send() -> None:
        try:
            httpx.post(f"{victim.base_url}/message", json=payload, headers=headers, timeout=240)
        except httpx.HTTPError as exc:
            errors.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 120
    while calls(deployment.root, "supervisor") == before:  # the task started on an actor
        assert time.monotonic() < deadline, victim.logs()
        time.sleep(0.05)
    assert victim.proc is not None
    victim.proc.kill()  # SIGKILL to uv and the front end
    victim.proc.wait(30)
    sender.join(60)
    assert errors, "the client of the killed front end got an answer"
    r = _retry_until_done(f"{survivor.base_url}/message", payload, headers)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == EXPECTED.format(text)
    after = (calls(deployment.root, "worker1"), calls(deployment.root, "worker2"))
    assert after == (workers[0] + 1, workers[1] + 1)  # the agents ran once for this message
    tasks = httpx.get(f"{survivor.base_url}/tasks", headers=auth_header(key), timeout=60).json()
    assert list(tasks) == [r.json()["task_id"]]  # alice's one task


def test_dropped_stream_retried_through_the_other_front_end_attaches(
    deployment: ClusterDeployment,
) -> None:
    first, second = (f.base_url for f in deployment.front_ends[:2])
    key = deployment.keys["admin"]
    headers = {**auth_header(key), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    text = f"stream-{uuid.uuid4().hex[:6]}"
    payload = {"body": f"FANOUT {text}", "stream": True}
    workers = (calls(deployment.root, "worker1"), calls(deployment.root, "worker2"))
    with httpx.stream("POST", f"{first}/message", json=payload, headers=headers, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for event in parse_sse_stream(r):
            if event.event != "ping":
                break  # the task runs; the client drops after its first event
    events = []
    with httpx.stream("POST", f"{second}/message", json=payload, headers=headers, timeout=240) as r:
        assert r.status_code == 200, r.read()
        assert r.headers.get("idempotent-replayed") == "true"
        for event in parse_sse_stream(r):
            if event.event == "ping":
                continue
            events.append(event)
            if event.event in ("task_complete", "task_error") and event.id is None:
                break
    assert events[-1].event == "task_complete", [e.event for e in events]
    assert events[-1].json()["response"] == EXPECTED.format(text)
    ids = [int(e.id) for e in events if e.id is not None]
    assert ids[0] == 1 and ids == list(range(1, len(ids) + 1))
    after = (calls(deployment.root, "worker1"), calls(deployment.root, "worker2"))
    assert after == (workers[0] + 1, workers[1] + 1)
    with httpx.stream(
        "POST",
        f"{first}/message",
        json=payload,
        headers={**headers, "Last-Event-ID": "2"},
        timeout=120,
    ) as r:
        later = [e for e in parse_sse_stream(r) if e.event != "ping"]
    assert [int(e.id) for e in later if e.id is not None][0] == 3
    assert later[-1].json()["response"] == EXPECTED.format(text)
