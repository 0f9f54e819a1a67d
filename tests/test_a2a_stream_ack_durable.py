"""Acknowledged means stored, for A2A streams too: an A2A ``SendStreamingMessage`` whose first
event (the Task, with its ``contextId``: the MAIL task's id) reached the caller survives a
kill -9 of the server.

A real `mail server` (SQLite, the default; PostgreSQL in a schema of this test's own) gets a
streamed A2A message; as soon as the caller has the first SSE event, the server is killed with
SIGKILL (after 0 to 40 ms), a new server starts on the same store, and the caller asks for
the MAIL task the context names (`GET /task`): it must be there, with the caller's message.
Seen by hand: 2 to 3 of 10 tries at 0 ms lost the task on SQLite (404 after the restart).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.durable_agents import swarms_json
from tests.support.store_backends import DurableStore, scratch_durable_store

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(600)

TRIES = 20


@pytest.fixture(params=["sqlite", "postgres"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableStore]:
    """The server's default SQLite file, or a PostgreSQL schema of this test's own."""
    with scratch_durable_store(request.param, tmp_path, "mail_a2a_ack") as store:
        yield store


def _server(directory: Path, swarm: str, store: DurableStore) -> ServerProcess:
    port = free_port()
    config = write_config(directory, port=port, swarm=swarm)
    env = {**store.env, "MAIL_STUB_LATENCY_MS": "300"}
    return ServerProcess(directory, port, args=["--config", str(config)], env=env)


def _first_event_then_kill(
    server: ServerProcess, key: str, text: str, delay: float
) -> tuple[str, Any]:
    """Send `text` over A2A as a stream; `delay` s after its first event, kill -9 the server.
    Returns the context id (the MAIL task id) the first event named, and its state."""
    assert server.proc is not None
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {
            "message": {
                "role": "ROLE_USER",
                "messageId": str(uuid.uuid4()),
                "parts": [{"text": text}],
            }
        },
    }
    try:
        with httpx.stream(
            "POST",
            f"{server.base_url}/a2a",
            json=body,
            headers={**auth(key), "A2A-Version": "1.0"},
            timeout=60,
        ) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if line.startswith("data:"):
                    result = json.loads(line[len("data:") :].strip())["result"]
                    break
            else:
                raise AssertionError("the stream ended before its first event")
            time.sleep(delay)  # the delay under test, not a wait for something
            server.proc.kill()  # kill -9: no shutdown hook runs
    finally:
        server.proc.kill()
        server.proc.wait(10)
    first = result.get("task") or result.get("statusUpdate") or result.get("message") or {}
    context = first.get("contextId")
    assert isinstance(context, str) and context, result
    return context, first.get("status", {}).get("state")


def test_a2a_streamed_message_survives_kill_after_first_event(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    swarm = f"a2aack-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    server = _server(tmp_path, swarm, durable_store).start()
    lost: list[tuple[int, str]] = []
    try:
        for i in range(TRIES):
            delay = 0.0 if i % 2 == 0 else 0.040 * i / TRIES
            text = f"FANOUT a2a {i}"
            task_id, first_state = _first_event_then_kill(server, key, text, delay)
            server = _server(tmp_path, swarm, durable_store).start()
            r = httpx.get(
                f"{server.base_url}/task",
                params={"task_id": task_id},
                headers=auth(key),
                timeout=30,
            )
            if r.status_code == 404 or text not in r.text:
                seen = r.text[:300]  # which way it was lost: no task, or a task without it
                lost.append((round(delay * 1000), task_id, first_state, r.status_code, seen))
                continue
            assert r.status_code == 200, r.text
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(10)
    assert not lost, (
        f"{len(lost)} of {TRIES} A2A streamed tasks were gone after kill -9 "
        f"({durable_store.kind}; delay ms, task id, first event's state, GET /task): {lost}"
    )
