"""Cluster mode: a keyed ``POST /message`` sent to one front end and retried through the other
gets the same outcome, and the work ran once (the agents log each call they get).

Real Ray cluster (a head and one worker node), two ``mail server --cluster ray`` front ends,
PostgreSQL: the keys live in the database every front end and instance host shares.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from tests.support.keyed_cluster import calls, two_front_ends
from tests.support.ray_cluster import ClusterDeployment, auth_header
from tests.test_cluster_ray import _require

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDeployment]:
    _require()
    with two_front_ends(tmp_path_factory.mktemp("idem-cluster"), latency_ms=300) as dep:
        yield dep


def test_retry_through_the_other_front_end_gets_the_same_outcome(
    deployment: ClusterDeployment,
) -> None:
    first, second = (f.base_url for f in deployment.front_ends)
    headers = {**auth_header(deployment.keys["alice"]), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    payload = {"body": "hello"}
    expected = "both: worked(worker1): hello A + worked(worker2): hello B"
    try:  # the client gives up before the answer (the agents take 300 ms a call)
        httpx.post(f"{first}/message", json=payload, headers=headers, timeout=0.5)
    except httpx.TimeoutException:
        pass
    deadline = time.monotonic() + 240
    while True:
        r = httpx.post(f"{second}/message", json=payload, headers=headers, timeout=240)
        if r.status_code not in (409, 503) or "retry-after" not in r.headers:
            break
        assert time.monotonic() < deadline, r.text
        time.sleep(0.3)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == expected
    again = httpx.post(f"{first}/message", json=payload, headers=headers, timeout=60)
    assert again.status_code == 200 and again.content == r.content
    assert again.headers["idempotent-replayed"] == "true"
    tasks = httpx.get(f"{first}/tasks", headers=auth_header(deployment.keys["alice"]), timeout=60)
    assert list(tasks.json()) == [r.json()["task_id"]]
    assert calls(deployment.root, "worker1") == calls(deployment.root, "worker2") == 1
