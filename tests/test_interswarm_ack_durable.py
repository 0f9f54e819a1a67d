"""Acknowledged means stored, for interswarm deliveries: a peer's ``POST /interswarm/forward``
answered 200 (its router then counts the delivery as done, and its key as answered) finds its
task stored, even when the server is killed with SIGKILL right after the answer.

A real `mail server` (SQLite, the default; PostgreSQL in a schema of this test's own) with
interswarm on; a peer's agent key forwards a new task, and the server is killed 0 to 20 ms
after the answer; the store must hold the task and the peer's message. Before the fix the
answer left before anything was committed (8 of 10 tasks were gone on SQLite).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.interswarm_agents import swarm_json
from tests.support.peer_envelopes import forward_new_task
from tests.support.store_backends import DurableStore, scratch_durable_store

from server_fixtures import ServerProcess, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(600)

TRIES = 10
MAX_DELAY = 0.020  # seconds between the answer and the kill


@pytest.fixture(params=["sqlite", "postgres"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableStore]:
    with scratch_durable_store(request.param, tmp_path, "mail_isw_ack") as store:
        yield store


def test_a_forwarded_task_survives_kill_after_the_answer(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    (tmp_path / "swarms.json").write_text(
        json.dumps(swarm_json("swarm-alpha", "swarm-beta")), encoding="utf-8"
    )
    keys = {"peer": create_key(tmp_path / "registries" / "keys.json", "agent", "peer-x")}
    lost: list[tuple[float, str]] = []
    for i in range(TRIES):
        port = free_port()
        config = write_config(tmp_path, port=port, swarm="swarm-alpha")
        # The agents take a while: the task still runs when the server is killed.
        env = {**durable_store.env, "MAIL_STUB_LATENCY_MS": "300"}
        server = ServerProcess(tmp_path, port, args=["--config", str(config)], env=env)
        server.keys = keys
        server.start()
        assert server.proc is not None
        task_id = str(uuid.uuid4())
        delay = MAX_DELAY * i / (TRIES - 1)
        try:
            accepted = forward_new_task(server, task_id)
            assert accepted.status_code == 200, accepted.text
            time.sleep(delay)  # the delay under test, not a wait for something
        finally:
            server.proc.kill()  # kill -9: no shutdown hook runs
            server.proc.wait(10)
        stored = durable_store.fetch("SELECT task_id FROM tasks WHERE task_id = $1", task_id)
        events = durable_store.fetch(
            "SELECT count(*) AS n FROM task_events WHERE task_id = $1", task_id
        )
        if not stored or not events or not events[0]["n"]:
            lost.append((round(delay * 1000), task_id))
    assert not lost, (
        f"{len(lost)} of {TRIES} forwarded tasks were gone after kill -9 "
        f"({durable_store.kind}; delay ms, task id): {lost}"
    )
