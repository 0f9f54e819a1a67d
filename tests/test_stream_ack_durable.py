"""Acknowledged means stored, for streams too: a streamed ``POST /message`` survives kill -9.

A real `mail server` (SQLite, the default; PostgreSQL in a schema of this test's own) gets a
streamed message; as soon as the caller has the first SSE event (which names the task), the
server is killed with SIGKILL after a delay spread from 0 to 100 ms, a new server starts on
the same store, and the caller asks for its task: it must be there (never 404). The killed
server's successor is the next try's server, so each try costs one start-up.

Before the fix, the stream's first event left before the store had committed anything
(3 of 20 tries lost the task on SQLite, 20 of 20 on PostgreSQL).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.durable_agents import swarms_json
from tests.support.store_backends import DurableStore, scratch_durable_store

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(600)

TRIES = 20
MAX_DELAY = 0.100  # seconds between the first event and the kill


@pytest.fixture(params=["sqlite", "postgres"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableStore]:
    """The server's default SQLite file, or a PostgreSQL schema of this test's own."""
    with scratch_durable_store(request.param, tmp_path, "mail_stream_ack") as store:
        yield store


def _server(directory: Path, swarm: str, store: DurableStore) -> ServerProcess:
    port = free_port()
    config = write_config(directory, port=port, swarm=swarm)
    # The workers take a while: the task is still running when the server is killed.
    env = {**store.env, "MAIL_STUB_LATENCY_MS": "300"}
    return ServerProcess(directory, port, args=["--config", str(config)], env=env)


def _first_event_then_kill(server: ServerProcess, key: str, delay: float) -> str:
    """Stream a new task's message; ``delay`` s after its first event, kill -9 the server.
    Returns the task id the first event named."""
    assert server.proc is not None
    try:
        with httpx.stream(
            "POST",
            f"{server.base_url}/message",
            json={"body": "FANOUT go", "stream": True},
            headers=auth(key),
            timeout=60,
        ) as response:
            assert response.status_code == 200, response.read()
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("data:"):
                    data = json.loads(line[len("data:") :].strip())
                    break
            else:
                raise AssertionError("the stream ended before its first event")
            time.sleep(delay)  # the delay under test, not a wait for something
            server.proc.kill()  # kill -9: no shutdown hook runs
    finally:
        server.proc.kill()
        server.proc.wait(10)
    task_id = data["task_id"]
    assert isinstance(task_id, str) and task_id, data
    return str(task_id)


def test_streamed_message_survives_kill_after_first_event(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    swarm = f"ack-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    server = _server(tmp_path, swarm, durable_store).start()
    lost: list[tuple[float, str]] = []
    try:
        for i in range(TRIES):
            delay = MAX_DELAY * i / (TRIES - 1)
            task_id = _first_event_then_kill(server, key, delay)
            server = _server(tmp_path, swarm, durable_store).start()
            r = httpx.get(
                f"{server.base_url}/task",
                params={"task_id": task_id},
                headers=auth(key),
                timeout=30,
            )
            if r.status_code == 404:
                lost.append((round(delay * 1000), task_id))
                continue
            assert r.status_code == 200, r.text
            assert r.json()["task_id"] == task_id
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(10)
    assert not lost, (
        f"{len(lost)} of {TRIES} streamed tasks were gone after kill -9 "
        f"({durable_store.kind}; delay ms, task id): {lost}"
    )
