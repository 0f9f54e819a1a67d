"""An outside agent joined over MCP starts tasks of its caller: they are under the caller's
storage quotas, as ``POST /message`` is.

``send_request`` without a ``task_id`` (and the other sending tools, once the agent's task is
completed) starts a new task in the caller's instance. It did so past
``[server.store] max_stored_tasks_per_caller`` and ``max_stored_bytes_per_caller``: a caller
refused 429 on ``POST /message`` kept storing tasks through MCP (6 kept with a bound of 2).
Real ``mail server`` (stub swarm), the ``mcp`` SDK's client over Streamable HTTP.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mcp_face_support import ToolFailed, mcp_agent
from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server, post_as

pytestmark = pytest.mark.timeout(300)

MAX_TASKS = 2
MAX_BYTES = 1_500_000
STORE = f"""
[server.store]
max_stored_tasks_per_caller = {MAX_TASKS}
max_stored_bytes_per_caller = {MAX_BYTES}
"""


@pytest.fixture
def server(tmp_path: Any) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=STORE) as srv:
        yield srv


def tasks_of(server: ServerProcess, who: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[who]), timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json().values())  # keyed by task id


def wait_finished(server: ServerProcess, who: str, count: int) -> None:
    """Until the caller lists `count` tasks, none of them running (a loaded machine: 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = tasks_of(server, who)
        if len(records) >= count and not any(r.get("is_running") for r in records):
            return
        time.sleep(0.1)
    raise AssertionError(f"{who}'s tasks did not finish: {tasks_of(server, who)}")


async def send(server: ServerProcess, who: str, body: str) -> Any:
    """The tool's answer, or its error text (a ToolFailed raised out of the session's task
    group would come wrapped in an exception group)."""
    async with mcp_agent(server.base_url, server.keys[who]) as agent:
        await agent.call("join_swarm", name="helper")
        try:
            return await agent.call("send_request", target="supervisor", subject="s", body=body)
        except ToolFailed as exc:
            return str(exc)


def test_mcp_send_request_stops_at_the_task_quota(server: ServerProcess) -> None:
    for n in range(MAX_TASKS):
        assert asyncio.run(send(server, "alice", f"task {n}"))["task_id"]
    wait_finished(server, "alice", MAX_TASKS)
    refused = asyncio.run(send(server, "alice", "one too many"))
    assert "429: " in refused and "max_stored_tasks_per_caller = 2" in refused, refused
    time.sleep(0.5)  # a task the refused call had started would be listed by now
    assert len(tasks_of(server, "alice")) == MAX_TASKS
    # The HTTP route sees the same books; another caller is not affected.
    over = post_as(server, "alice", {"body": "and over HTTP", "subject": "s"}, timeout=60)
    assert over.status_code == 429 and "max_stored_tasks_per_caller" in over.json()["detail"]
    assert asyncio.run(send(server, "bob", "bob's"))["task_id"]


def test_mcp_send_request_stops_at_the_byte_quota(server: ServerProcess) -> None:
    # The first task stores the 600 kB message and its echo: the next one would pass 1.5 MB.
    assert asyncio.run(send(server, "alice", "x" * 600_000))["task_id"]
    wait_finished(server, "alice", 1)
    refused = asyncio.run(send(server, "alice", "y" * 600_000))
    assert "429: " in refused and "max_stored_bytes_per_caller = 1500000" in refused, refused
    time.sleep(0.5)
    assert len(tasks_of(server, "alice")) == 1
    assert asyncio.run(send(server, "bob", "z" * 600_000))["task_id"]


async def send_files(server: ServerProcess, who: str, count: int) -> list[Any]:
    """transfer_file of `count` files of 600 kB to the user, one after another: each answer,
    or its error text."""
    answers: list[Any] = []
    async with mcp_agent(server.base_url, server.keys[who]) as agent:
        await agent.call("join_swarm", name="helper")
        for n in range(count):
            try:
                answers.append(
                    await agent.call(
                        "transfer_file", recipient="user", filename=f"f{n}", content="x" * 600_000
                    )
                )
            except ToolFailed as exc:
                answers.append(str(exc))
    return answers


def test_mcp_files_in_a_row_stop_at_the_byte_quota(server: ServerProcess) -> None:
    # Files go to the agent's own task, which they keep running: the bytes are checked as
    # uploads are, whatever the task, and counted at once (2 x 600 kB fit in 1.5 MB).
    answers = asyncio.run(send_files(server, "alice", 4))
    assert [isinstance(a, dict) for a in answers] == [True, True, False, False], answers
    assert "429: " in answers[2] and "max_stored_bytes_per_caller = 1500000" in answers[2]
    assert all(isinstance(a, dict) for a in asyncio.run(send_files(server, "bob", 2)))


async def post_in_a_row(server: ServerProcess, who: str, count: int) -> list[Any]:
    """Thread posts of 600 kB, one after another: each answer, or its error text."""
    answers: list[Any] = []
    key = server.keys[who]
    async with mcp_agent(server.base_url, key) as one, mcp_agent(server.base_url, key) as two:
        await one.call("join_swarm", name="helper")
        await two.call("join_swarm", name="other")
        made = await one.call("create_thread", title="plans", participants=["other"])
        thread_id = json.loads(str(made).split(": ", 1)[1])["thread_id"]
        for _ in range(count):
            try:
                answers.append(
                    await one.call("post_to_thread", thread_id=thread_id, body="x" * 600_000)
                )
            except ToolFailed as exc:
                answers.append(str(exc))
    return answers


def test_mcp_thread_posts_in_a_row_stop_at_the_byte_quota(server: ServerProcess) -> None:
    # A post to a thread of two is stored three times: the post, the other participant's
    # inbox entry and the task's thread_post event (1.8 MB): the next one is refused.
    answers = asyncio.run(post_in_a_row(server, "alice", 3))
    assert [a.startswith("posted") for a in answers] == [True, False, False], answers
    assert "429: " in answers[1] and "max_stored_bytes_per_caller = 1500000" in answers[1]
    assert all(a.startswith("posted") for a in asyncio.run(post_in_a_row(server, "bob", 1)))
