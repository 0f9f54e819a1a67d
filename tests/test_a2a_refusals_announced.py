"""A2A sends that MAIL refuses or a caller abandons, now that the new Task is announced only
once MAIL has committed it: none may hang, each ends in a state the caller can read.

A real `mail server` on the stub swarms (bodies above `max_message_body` refused with 413,
a second message to a working MAIL task with 409), the official a2a SDK client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, ListTasksRequest, TaskState

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)

LIMIT = 2000
WAIT = 60.0  # far more than any of these needs; a hang fails here, not at the test timeout


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = f"max_message_body = {LIMIT}\n"
    with keyed_stub_server(tmp_path_factory.mktemp("a2a_ref"), ROOT_ALICE_BOB, extra=extra) as srv:
        yield srv


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_body_too_large_ends_rejected(server: ServerProcess, streaming: bool) -> None:
    async with a2a_client(
        server.base_url, server.keys["alice"], streaming=streaming, polling=not streaming
    ) as client:
        events = await asyncio.wait_for(collect(client, message("x" * (LIMIT + 10))), WAIT)
        assert events, "no event at all"
        task_id = events[0].task.id or events[-1].status_update.task_id
        assert task_id, events
        deadline = asyncio.get_running_loop().time() + WAIT
        while True:
            got = await client.get_task(GetTaskRequest(id=task_id))
            if got.status.state == TaskState.TASK_STATE_REJECTED:
                break
            assert asyncio.get_running_loop().time() < deadline, got
            await asyncio.sleep(0.2)
        assert "413" in got.status.message.parts[0].text, got


async def test_a_second_message_to_a_working_context_is_rejected(server: ServerProcess) -> None:
    async with a2a_client(server.base_url, server.keys["bob"], streaming=True) as client:
        first = client.send_message(message("SLEEP 20 first"))
        opened = await asyncio.wait_for(anext(first), WAIT)
        task = opened.task
        assert task.id, opened
        # A new A2A task in the same context: its MAIL task is the working one (409).
        events = await asyncio.wait_for(
            collect(client, message("again", context_id=task.context_id)), WAIT
        )
        states = [e.status_update.status.state for e in events if e.HasField("status_update")]
        final = events[-1].task if events[-1].HasField("task") else None
        assert TaskState.TASK_STATE_REJECTED in states or (
            final is not None and final.status.state == TaskState.TASK_STATE_REJECTED
        ), events
        with contextlib.suppress(Exception):
            await first.aclose()


async def test_a_stream_abandoned_before_its_first_event_still_makes_a_task(
    server: ServerProcess,
) -> None:
    async with a2a_client(server.base_url, server.keys["admin"], streaming=True) as client:
        before = await client.list_tasks(ListTasksRequest())
        stream = client.send_message(message("SLEEP 2 abandoned"))
        step = asyncio.ensure_future(anext(stream))
        # The request is on its way (the stub's turn alone takes 2 s): the caller gives up.
        await asyncio.sleep(0.3)
        step.cancel()
        with contextlib.suppress(BaseException):
            await step
        with contextlib.suppress(BaseException):
            await stream.aclose()
        deadline = asyncio.get_running_loop().time() + WAIT
        while True:
            now = await client.list_tasks(ListTasksRequest())
            fresh = [t for t in now.tasks if t.id not in {b.id for b in before.tasks}]
            if fresh and fresh[0].status.state == TaskState.TASK_STATE_COMPLETED:
                break
            assert asyncio.get_running_loop().time() < deadline, now
            await asyncio.sleep(0.2)
        # the server answers the next send at once
        events = await asyncio.wait_for(collect(client, message("after")), WAIT)
        assert events[-1].HasField("task") or events[-1].HasField("status_update"), events
