"""An A2A cancel that lands while the message is still on its way into MAIL.

A caller's first request builds their instance and reads the store (their books, the
context's task) before the message reaches MAIL; a non-blocking send has already answered
``submitted`` by then. A cancel in that window used to cancel the A2A task only: the message
never reached MAIL, so the MAIL task the caller was told about (the A2A context) did not
exist: ``GET /task`` 404, ``GET /tasks`` empty; and a new task continuing a finished context
was refused as "already finished" while its message went on to run. Now the cancel waits for
the message, then cancels the MAIL task, which keeps its ``task_cancelled`` event, across a
restart too.

Each caller's first request is the send here: the module has its own server.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, Task, TaskState

from server_fixtures import ServerProcess, auth, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)

# The window is a few milliseconds wide and the race is not forced: each caller is another
# first request (the unfixed server lost about half of them).
USERS = ("alice", "bob", "carol", "dave", "erin")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {name: ("user", name) for name in USERS}
    with keyed_stub_server(tmp_path_factory.mktemp("a2a_cancel_first"), keys) as srv:
        yield srv


async def _send_and_cancel(server: ServerProcess, key: str, context_id: str | None = None) -> Task:
    """A non-blocking send of a long turn, cancelled as soon as it was answered."""
    async with a2a_client(server.base_url, key, polling=True, streaming=False) as client:
        events = await collect(client, message("SLEEP 30 never finished", context_id=context_id))
        task = events[-1].task
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
    return task


def _mail_record(server: ServerProcess, key: str, task_id: str) -> dict[str, object]:
    r = httpx.get(
        f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=30
    )
    assert r.status_code == 200, r.text
    record: dict[str, object] = r.json()
    return record


def _check_cancelled(record: dict[str, object], times: int = 1) -> None:
    events = record["events"]
    assert isinstance(events, list)
    names = [e["event"] for e in events]
    assert names.count("task_cancelled") == times, names
    assert names[-1] == "task_cancelled", names  # the sleeping turn delivered nothing
    assert record["is_running"] is False


async def test_cancel_on_a_callers_first_request_keeps_the_mail_task(
    server: ServerProcess,
) -> None:
    tasks = {name: await _send_and_cancel(server, server.keys[name]) for name in USERS}
    for name, task in tasks.items():
        key = server.keys[name]
        _check_cancelled(_mail_record(server, key, task.context_id))
        listed = httpx.get(f"{server.base_url}/tasks", headers=auth(key), timeout=30).json()
        assert task.context_id in listed, listed
    # The record is in the store: a restarted server still has it.
    assert server.stop() == 0, server.logs()
    server.start()
    for name, task in tasks.items():
        _check_cancelled(_mail_record(server, server.keys[name], task.context_id))
    # First request after the restart: a new A2A task continuing the finished context (read
    # back from the store first), cancelled at once, is cancelled, not refused as finished.
    for name, task in tasks.items():
        key = server.keys[name]
        again = await _send_and_cancel(server, key, task.context_id)
        assert again.context_id == task.context_id
        _check_cancelled(_mail_record(server, key, again.context_id), times=2)
