"""An admin's ``GET /tasks`` lists the tasks remote swarms work on here (docs/interswarm.md)
after they finished and left memory too, read back from the store as the caller's own are
(docs/database.md#finished-tasks-leave-memory: "everything that shows a task reads a finished
one back from the store, with the same answer as before").

A peer's task ends here (its answer goes to a swarm that is not running) and leaves memory
about three seconds later; the admin's listing dropped it then, while ``GET /task`` still
found it. A real `mail server` with interswarm on.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.interswarm_server import alpha_server
from tests.support.peer_envelopes import forward_new_task

from server_fixtures import ServerProcess, auth

pytestmark = pytest.mark.timeout(240)

_COMPLETED = re.compile(r'^mail_tasks\{state="completed"\} (\S+)$', re.M)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with alpha_server(tmp_path, {"peer": ("agent", "peer-x"), "admin": ("admin", "root")}) as srv:
        yield srv


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def test_a_peers_finished_task_stays_listed_for_the_admin(server: ServerProcess) -> None:
    admin = auth(server.keys["admin"])
    task_id = str(uuid.uuid4())
    accepted = forward_new_task(server, task_id)
    assert accepted.status_code == 200, accepted.text

    def task_state() -> str | None:
        found = httpx.get(
            f"{server.base_url}/task", params={"task_id": task_id}, headers=admin, timeout=30
        )
        return found.json().get("state") if found.status_code == 200 else None

    def completed_in_memory() -> float:
        metrics = httpx.get(f"{server.base_url}/metrics", headers=admin, timeout=30).text
        found = _COMPLETED.search(metrics)
        return float(found.group(1)) if found else 0.0

    _until(lambda: task_state() == "completed", "the peer's task completed")
    _until(lambda: completed_in_memory() == 0, "the finished task left memory")
    listed = httpx.get(f"{server.base_url}/tasks", headers=admin, timeout=30)
    assert listed.status_code == 200, listed.text
    assert task_id in listed.json(), sorted(listed.json())
    assert listed.json()[task_id]["state"] == "completed"
    assert task_state() == "completed"  # GET /task found it all along


def test_a_peers_task_stays_listed_after_its_instance_left_memory(
    server: ServerProcess,
) -> None:
    """After a restart (as after an idle reclaim) no instance of the peer is in memory: its
    finished task is in the store only, and the admin's listing still shows it."""
    admin = auth(server.keys["admin"])
    task_id = str(uuid.uuid4())
    accepted = forward_new_task(server, task_id)
    assert accepted.status_code == 200, accepted.text

    def listed() -> dict[str, dict[str, object]]:
        answer = httpx.get(f"{server.base_url}/tasks", headers=admin, timeout=30)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    _until(lambda: listed().get(task_id, {}).get("state") == "completed", "the task completed")
    assert server.stop() == 0, server.logs()
    server.start()
    rows = listed()
    assert task_id in rows, sorted(rows)
    assert rows[task_id]["state"] == "completed"
    one = httpx.get(f"{server.base_url}/tasks", params={"limit": 1}, headers=admin, timeout=30)
    assert list(one.json()) == [task_id], one.text
