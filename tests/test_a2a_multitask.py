"""A2A messages to a context whose MAIL task is still working: the same multitask strategies
as ``POST /message``, through the official a2a-sdk client, on a real `mail server`.

An A2A context is one MAIL task; a new A2A task in the context is a new message to it (A2A
allows it: the message names no task that has ended). While the first A2A task's MAIL work
is under way (a slow worker), a second task in the same context is refused by default
(``rejected``, 409, as on ``/message``); with ``"multitask_strategy": "interrupt"`` in its
data part, the first A2A task ends ``canceled`` (its MAIL work was interrupted) and the
second completes with the supervisor's answer, which still holds the first message.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.helpers.proto_helpers import get_message_text
from a2a.types.a2a_pb2 import TaskState
from tests.support.multitask_agents import swarms_json

from server_fixtures import SingleServerProcess, create_key, free_port, write_config
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, Path]]:
    root = tmp_path_factory.mktemp("a2a-multitask")
    (root / "swarms.json").write_text(json.dumps(swarms_json("multi")), encoding="utf-8")
    key = create_key(root / "registries" / "keys.json", "user", "alice")
    port = free_port()
    config = write_config(root, port=port, swarm="multi")
    env = {"MAIL_MULTITASK_LOG": str(root / "calls.log")}
    server = SingleServerProcess(root, port, args=["--config", str(config)], env=env).start()
    try:
        yield server, key, root / "calls.log"
    finally:
        server.stop()


async def _worker_started(log: Path, body: str) -> None:
    deadline = time.monotonic() + 60
    while f"worker start {body}" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"the worker never got {body!r}"
        await asyncio.sleep(0.02)


async def _first_task(client: Any, text: str) -> tuple[str, asyncio.Task[list[Any]]]:
    """Start a task; its context id (from the first event) and the rest of its stream."""
    stream: AsyncIterator[Any] = client.send_message(message(text))
    first = await anext(stream)
    context_id = first.task.context_id if first.HasField("task") else first.status_update.context_id

    async def rest() -> list[Any]:
        return [first, *[event async for event in stream]]

    return context_id, asyncio.create_task(rest())


def _final(events: list[Any]) -> Any:
    for event in reversed(events):
        if event.HasField("task"):
            return event.task
        if event.HasField("status_update") and event.status_update.status.state in (
            TaskState.TASK_STATE_COMPLETED,
            TaskState.TASK_STATE_CANCELED,
            TaskState.TASK_STATE_REJECTED,
            TaskState.TASK_STATE_FAILED,
        ):
            return event.status_update
    raise AssertionError(events)


async def test_a_new_task_in_a_working_context_takes_the_strategy(served: Any) -> None:
    server, key, log = served
    async with a2a_client(server.base_url, key) as client:
        context_id, first = await _first_task(client, "ASK SLOW 30 a2a-first")
        await _worker_started(log, "SLOW 30 a2a-first")

        refused = _final(await collect(client, message("COUNT", context_id=context_id)))
        assert refused.status.state == TaskState.TASK_STATE_REJECTED
        assert get_message_text(refused.status.message).startswith("409: ")

        began = time.monotonic()
        second = _final(
            await collect(
                client,
                message("COUNT", {"multitask_strategy": "interrupt"}, context_id=context_id),
            )
        )
        assert time.monotonic() - began < 20  # not after the worker's 30 s
        assert second.status.state == TaskState.TASK_STATE_COMPLETED
        answer = get_message_text(second.status.message)
        assert answer == "callers: ASK SLOW 30 a2a-first | COUNT"

        earlier = _final(await asyncio.wait_for(first, 30))
        assert earlier.status.state == TaskState.TASK_STATE_CANCELED
        assert "interrupted by a newer message" in get_message_text(earlier.status.message)
    assert "worker end SLOW 30 a2a-first" not in log.read_text()
