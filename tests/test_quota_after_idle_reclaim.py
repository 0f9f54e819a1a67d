"""The task quota holds on the memory store for a caller whose instance was reclaimed.

On the memory store a caller's finished tasks that its client never got (a dropped stream)
go into its books at its next message (`FinishedTasks._count_unbooked`), which looks at
them only when its instance holds more finished tasks than the books have. An instance
reclaimed while idle leaves its tasks archived, still in the books but no longer in the
caller's next instance: that instance's unbooked tasks were hidden behind the archived
ones, and a caller with 2 archived tasks and a bound of 3 was let in with 3 stored and
more (until the sweep booked them, seconds later). And a dropped stream's task whose instance
was reclaimed before the sweep booked it (an idle timeout under the sweep's few seconds) was
never booked at all: a caller with a bound of 2 kept any number of tasks. Real ``mail
server``, stub swarm.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, keyed_stub_server, post_as
from test_quota_dropped_streams import stream_and_drop, wait_finished

pytestmark = pytest.mark.timeout(300)

MAX_TASKS = 3
IDLE_TIMEOUT = 6  # (long enough that the second instance outlives the test)


def send(server: ServerProcess, who: str, body: str) -> httpx.Response:
    return post_as(server, who, {"body": body, "subject": "s"}, timeout=60)


def reclaiming_after(server: ServerProcess, directory: Path, seconds: float) -> None:
    """Start `server` again with idle instances reclaimed after `seconds` (the fixture's
    config keeps them forever)."""
    server.stop()
    config = directory / "mail.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace("instance_idle_timeout = 0", f"instance_idle_timeout = {seconds}"),
        encoding="utf-8",
    )
    server.start()


def reclaims(server: ServerProcess) -> int:
    return server.logs().count("reclaimed idle user instance for alice")


def test_unbooked_tasks_count_after_the_instance_was_reclaimed(tmp_path: Path) -> None:
    extra = f'\n[server.store]\nkind = "memory"\nmax_stored_tasks_per_caller = {MAX_TASKS}\n'
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=extra) as server:
        reclaiming_after(server, tmp_path, IDLE_TIMEOUT)
        for n in range(MAX_TASKS - 1):
            assert send(server, "alice", f"task {n}").status_code == 200
        deadline = time.monotonic() + 60
        while not reclaims(server):
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.1)
        status, task_id = stream_and_drop(server, "alice")  # in a new instance
        assert status == 200 and task_id is not None
        wait_finished(server, "alice", task_id)  # finished, not yet booked by the sweep
        refused = send(server, "alice", "one too many")
        assert refused.status_code == 429, refused.text
        assert send(server, "bob", "another caller").status_code == 200


def test_a_task_reclaimed_before_the_sweep_booked_it_counts(tmp_path: Path) -> None:
    bound = 2
    extra = f'\n[server.store]\nkind = "memory"\nmax_stored_tasks_per_caller = {bound}\n'
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=extra) as server:
        reclaiming_after(server, tmp_path, 1)  # before the sweep's grace (2 s)
        statuses = []
        for _ in range(bound + 2):
            before = reclaims(server)
            status, task_id = stream_and_drop(server, "alice")
            statuses.append(status)
            if task_id is None:
                continue
            wait_finished(server, "alice", task_id)
            deadline = time.monotonic() + 60
            while reclaims(server) == before:  # its instance goes, the task archived
                assert time.monotonic() < deadline, server.logs()
                time.sleep(0.05)
        assert statuses == [200] * bound + [429] * 2, statuses
        assert send(server, "alice", "and a plain one").status_code == 429
