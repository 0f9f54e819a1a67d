"""The per-caller task quota holds for a caller that drops its streams.

A streamed ``POST /message`` whose client leaves after the first event leaves its task
running (here for 0.3 s); when it finishes nobody is answered with it, so it stayed out of the caller's books
until the sweep let it go, seconds later, and no longer counted as open either: a caller
that sent, dropped and sent again kept any number of tasks past
``max_stored_tasks_per_caller`` (5 with a bound of 2). Now the check counts the finished
tasks its instance still holds. Real ``mail server`` on SQLite and on the memory store,
stub swarm.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

MAX_TASKS = 2


@pytest.fixture(params=["sqlite", "memory"])
def server(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[ServerProcess]:
    extra = (
        f'\n[server.store]\nkind = "{request.param}"\nmax_stored_tasks_per_caller = {MAX_TASKS}\n'
    )
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=extra) as srv:
        yield srv


def stream_and_drop(server: ServerProcess, who: str) -> tuple[int, str | None]:
    """(status, task id): the stream is left after its first event."""
    with httpx.stream(
        "POST",
        f"{server.base_url}/message",
        json={"body": "SLEEP 0.3 hello", "subject": "s", "stream": True},
        headers=auth(server.keys[who]),
        timeout=60,
    ) as answer:
        if answer.status_code != 200:
            answer.read()
            return answer.status_code, None
        for line in answer.iter_lines():
            if line.startswith("data:") and '"task_id"' in line:
                return 200, line.split('"task_id":"', 1)[1].split('"', 1)[0]
    raise AssertionError("the stream ended without naming its task")


def wait_finished(server: ServerProcess, who: str, task_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = httpx.get(
            f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(server.keys[who])
        )
        if got.status_code == 200 and got.json().get("completed"):
            return
        time.sleep(0.02)
    raise AssertionError(f"task {task_id} did not finish")


def test_dropped_streams_do_not_pass_the_task_quota(server: ServerProcess) -> None:
    statuses = []
    for _ in range(MAX_TASKS + 3):
        status, task_id = stream_and_drop(server, "alice")
        statuses.append(status)
        if task_id is not None:
            wait_finished(server, "alice", task_id)  # finished, not yet let go of
    assert statuses == [200] * MAX_TASKS + [429] * 3, statuses
    kept = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"])).json()
    assert len(kept) == MAX_TASKS
    assert stream_and_drop(server, "bob")[0] == 200  # another caller's books are its own
