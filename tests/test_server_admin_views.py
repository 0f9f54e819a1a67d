"""Operator views over every caller's work, against a real `mail server`.

Also part of the cluster matrix (tests/test_cluster_matrix.py): there each caller's instance
lives in its own actor and consecutive requests reach different front ends, so these views
must gather what every instance holds.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import (
    ROOT_ALICE_BOB,
    ServerProcess,
    auth,
    keyed_stub_server,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path_factory.mktemp("admin-views"), ROOT_ALICE_BOB) as proc:
        yield proc


def test_tasks_all_lists_every_callers_tasks(server: ServerProcess) -> None:
    keys = server.keys
    owned = {}
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        for who in ("alice", "bob"):
            reply = client.post("/message", json={"body": f"hi {who}"}, headers=auth(keys[who]))
            assert reply.status_code == 200, reply.text
            owned[reply.json()["task_id"]] = who
    for _ in range(2):  # fresh connections: in a cluster, each may reach another front end
        reply = httpx.get(f"{server.base_url}/tasks/all", headers=auth(keys["admin"]), timeout=60)
        assert reply.status_code == 200, reply.text
        tasks = {t["task_id"]: t for t in reply.json()["tasks"]}
        for task_id, who in owned.items():
            assert task_id in tasks
            assert tasks[task_id]["instance"] == f"user:{who}"
            assert tasks[task_id]["completed"] is True and tasks[task_id]["event_count"] > 0
            assert "events" not in tasks[task_id]
    denied = httpx.get(f"{server.base_url}/tasks/all", headers=auth(keys["alice"]), timeout=60)
    assert denied.status_code == 403
