"""A caller's stored tasks count after a restart even when one of its tasks ended first.

The server reads a caller's books from the store at its first message after a start. A task
of the caller that ended before that message (a paused task cancelled after the restart,
let go by the sweep) put the books in place with that one task, and they were never read
from the store: the caller's other stored tasks counted for nothing, and a caller at
`max_stored_tasks_per_caller` before the restart was let in again (4 stored with a bound
of 3, and so on after each restart). Real ``mail server`` on SQLite, stub swarm.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server, post_as

pytestmark = pytest.mark.timeout(300)

MAX_TASKS = 3


def send(server: ServerProcess, who: str, body: str) -> httpx.Response:
    return post_as(server, who, {"body": body, "subject": "s"}, timeout=60)


def test_stored_tasks_count_after_a_restart_when_a_task_ended_first(tmp_path: Path) -> None:
    extra = f"\n[server.store]\nmax_stored_tasks_per_caller = {MAX_TASKS}\n"
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=extra) as server:
        for n in range(MAX_TASKS - 1):
            assert send(server, "alice", f"task {n}").status_code == 200
        paused = send(server, "alice", "BREAKPOINT look at this")
        assert paused.status_code == 200, paused.text
        assert send(server, "alice", "one too many").status_code == 429
        assert server.stop() == 0
        server.start()
        cancelled = httpx.post(
            f"{server.base_url}/task/cancel",
            json={"task_id": paused.json()["task_id"]},
            headers=auth(server.keys["alice"]),
            timeout=60,
        )
        assert cancelled.status_code == 200 and cancelled.json()["cancelled"], cancelled.text
        # The sweep lets the cancelled task go (and books it) a few seconds after it ended;
        # nothing tells when, so wait past its grace (2 s) and interval (1 s).
        time.sleep(5)
        refused = send(server, "alice", "one too many after the restart")
        assert refused.status_code == 429, refused.text
        assert (
            len(httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"])).json())
            == MAX_TASKS
        )
