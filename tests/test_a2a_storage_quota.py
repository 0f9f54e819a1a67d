"""The per-caller store quotas hold for messages sent through A2A, however fast they come.

A task answered through A2A stays in its instance for a couple of seconds after it finished
(nobody's ``POST /message`` waited for it), and it was counted in the caller's books only
when it left: a caller sending ``SendMessage`` in a loop kept every task of the last seconds
out of its books, and passed ``max_stored_tasks_per_caller`` (5 tasks kept with a bound of 2,
then a ``POST /message`` accepted too). Now a task answered through A2A is counted at once,
as one answered over HTTP is. Real ``mail server``, JSON-RPC over HTTP as curl sends it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server, post_as

pytestmark = pytest.mark.timeout(300)

MAX_TASKS = 2
STORE = f"""
[server.store]
max_stored_tasks_per_caller = {MAX_TASKS}
max_stored_bytes_per_caller = 2500000
"""


@pytest.fixture
def server(tmp_path: Any) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=STORE) as srv:
        yield srv


def a2a_send(server: ServerProcess, who: str, text: str) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    answer = httpx.post(
        f"{server.base_url}/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
        headers={**auth(server.keys[who]), "A2A-Version": "1.0"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    task: dict[str, Any] = answer.json()["result"]["task"]
    return task


def status_text(task: dict[str, Any]) -> str:
    parts = task["status"].get("message", {}).get("parts", [])
    return "".join(p.get("text", "") for p in parts)


def stored_tasks(server: ServerProcess, who: str) -> int:
    return len(httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[who])).json())


def test_a2a_sends_in_a_row_stop_at_the_task_quota(server: ServerProcess) -> None:
    for n in range(MAX_TASKS):
        assert a2a_send(server, "alice", f"task {n}")["status"]["state"] == "TASK_STATE_COMPLETED"
    refused = a2a_send(server, "alice", "one too many")
    assert refused["status"]["state"] == "TASK_STATE_REJECTED", refused
    assert "max_stored_tasks_per_caller" in status_text(refused)
    assert stored_tasks(server, "alice") == MAX_TASKS
    # The HTTP route sees the same books; another caller is not affected.
    over = post_as(server, "alice", {"body": "and over HTTP", "subject": "s"}, timeout=60)
    assert over.status_code == 429 and "max_stored_tasks_per_caller" in over.json()["detail"]
    assert a2a_send(server, "bob", "bob's")["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a2a_sends_in_a_row_stop_at_the_byte_quota(server: ServerProcess) -> None:
    # The first task stores the 1 MB message and its 1 MB echo (at least), so the second
    # 1 MB message would pass 2.5 MB.
    big = "m" * 1_000_000
    assert a2a_send(server, "alice", big)["status"]["state"] == "TASK_STATE_COMPLETED"
    refused = a2a_send(server, "alice", big)
    assert refused["status"]["state"] == "TASK_STATE_REJECTED", refused["status"]
    assert "max_stored_bytes_per_caller" in status_text(refused)
