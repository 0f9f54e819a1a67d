"""Webhooks in cluster mode: two front ends (and their instance hosts) on one Ray cluster and
one PostgreSQL database, behind a round-robin port.

Each event is delivered once (no duplicates beyond retries): deliveries are claimed with
``FOR UPDATE SKIP LOCKED`` and a lease. A front end killed (SIGKILL) while its attempts are
under way loses its leases when they run out, and the other front end delivers them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server_fixtures import ServerProcess, create_key, free_port, write_config
from tests.support.ray_cluster import ray_available
from tests.support.webhook_receiver import ReceiverProcess
from tests.support.webhook_swarm import webhook_swarms_json
from tests.test_persistence_e2e import _database_reachable

pytestmark = pytest.mark.timeout(600)

WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]
retry_jitter = 0.0
poll_interval = 0.3
timeout = 2.0
connect_timeout = 1.0
"""

TASKS = 6


def _require() -> None:
    if not ray_available():
        if os.environ.get("MAIL_REQUIRE_RAY") == "1":
            pytest.fail("Ray is required (uv sync --extra cluster) but not installed")
        pytest.skip("Ray not installed")
    if not _database_reachable():
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required but unreachable")
        pytest.skip("PostgreSQL not reachable")


class Deployment:
    def __init__(self, server: Any, receiver: ReceiverProcess, key: str) -> None:
        self.server, self.receiver, self.key = server, receiver, key

    def post(self, path: str, body: dict[str, Any], base: str | None = None) -> httpx.Response:
        return httpx.post(
            (base or self.server.base_url) + path,
            json=body,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=120,
        )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    _require()
    from tests.support.cluster_server import cluster_server_class

    root: Path = tmp_path_factory.mktemp("webhooks_cluster")
    (root / "swarms.json").write_text(json.dumps(webhook_swarms_json("hooks")))
    key = create_key(root / "registries" / "keys.json", "user", "alice")
    port = free_port()
    config = write_config(root, port=port, swarm="hooks", extra=WEBHOOKS)
    cluster = cluster_server_class(ServerProcess)(root, port, args=["--config", str(config)])
    receiver = ReceiverProcess(free_port(), root).start()
    cluster.start()
    try:
        yield Deployment(cluster, receiver, key)
    finally:
        cluster.stop()
        receiver.stop()


def _task_ids(entries: list[dict[str, Any]]) -> list[str]:
    return [ReceiverProcess.payload(e)["data"]["task_id"] for e in entries]


def test_each_event_is_delivered_once(deployment: Deployment) -> None:
    r = deployment.post(
        "/webhooks", {"url": deployment.receiver.url("/once"), "events": ["task.completed"]}
    )
    assert r.status_code == 201, r.text
    deployment.receiver.secrets("/once", r.json()["secret"])
    tasks = []
    for i in range(TASKS):  # alternately through both front ends
        r = deployment.post("/message", {"body": f"hello {i}"})
        assert r.status_code == 200, r.text
        tasks.append(r.json()["task_id"])
    got = deployment.receiver.wait_for(TASKS, "/once", timeout=60)
    time.sleep(2.0)  # several polls of both front ends: nothing more may come
    got = deployment.receiver.received("/once")
    assert sorted(_task_ids(got)) == sorted(tasks), deployment.server.logs()[-4000:]
    assert len({g["headers"]["webhook-id"] for g in got}) == TASKS
    assert all(g["verified"] for g in got)


def test_a_killed_front_ends_deliveries_are_taken_over(deployment: Deployment) -> None:
    receiver = deployment.receiver
    r = deployment.post(
        "/webhooks", {"url": receiver.url("/takeover"), "events": ["task.completed"]}
    )
    assert r.status_code == 201, r.text
    # The receiver takes every attempt and never answers in time: each attempt holds its
    # lease for up to 2 s, then the delivery is retried by whichever front end polls first.
    receiver.script("/takeover", [200] * 1000, delay=30)
    tasks = []
    for i in range(TASKS):
        r = deployment.post("/message", {"body": f"later {i}"})
        assert r.status_code == 200, r.text
        tasks.append(r.json()["task_id"])
    # Wait until the front ends have been retrying for a while (both hold leases in turn).
    deadline = time.monotonic() + 60
    while len(receiver.received("/takeover")) < 4 * TASKS:
        assert time.monotonic() < deadline, "the deliveries were not retried"
        time.sleep(0.1)
    victim = deployment.server.front_ends[0]
    victim.proc.kill()  # SIGKILL: its leases are left behind
    victim.proc.wait(10)
    receiver.script("/takeover", [])  # answers at once from now on
    killed_at = time.time()
    deadline = time.monotonic() + 90
    while True:
        late = [g for g in receiver.received("/takeover") if g["at"] > killed_at + 0.5]
        if set(_task_ids(late)) >= set(tasks) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert set(_task_ids(late)) >= set(tasks), deployment.server.logs()[-4000:]
    # The survivor's own front end reports them delivered.
    survivor = deployment.server.front_ends[1].base_url
    webhooks = httpx.get(
        survivor + "/webhooks", headers={"Authorization": f"Bearer {deployment.key}"}, timeout=30
    ).json()["webhooks"]
    hook = next(w for w in webhooks if w["url"].endswith("/takeover"))
    found = httpx.get(
        f"{survivor}/webhooks/{hook['id']}/deliveries",
        headers={"Authorization": f"Bearer {deployment.key}"},
        timeout=30,
    ).json()["deliveries"]
    deadline = time.monotonic() + 30
    while any(d["status"] != "delivered" for d in found) and time.monotonic() < deadline:
        time.sleep(0.3)
        found = httpx.get(
            f"{survivor}/webhooks/{hook['id']}/deliveries",
            headers={"Authorization": f"Bearer {deployment.key}"},
            timeout=30,
        ).json()["deliveries"]
    assert sorted(d["task_id"] for d in found) == sorted(tasks)
    assert all(d["status"] == "delivered" for d in found), found
