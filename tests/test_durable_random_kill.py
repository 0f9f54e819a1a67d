"""kill -9 at random points of a running multi-hop task, on the default SQLite file and on
PostgreSQL: a restarted server continues the task from its journal.

The supervisor of tests/support/durable_agents.py fans out to two workers and answers with
both answers (four model calls over three agents, 80 ms each: some 300 ms in all). Each round kills the server
after a random delay (anywhere from the first store write to the task's end), starts a new
one on the same database and reattaches to the task: the task completes with the full
answer, its stored events are numbered without gap, no agent saw a message twice (a turn
re-run after the kill starts from where its interrupted run began), and no journal row is
left. The delays come from a seed printed on failure.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.support.durable_agents import swarms_json
from tests.support.store_backends import DurableStore, durable_store  # noqa: F401 - fixture
from tests.test_durable_restart import _histories, _stored_event_ids
from tests.test_persistence_e2e import database  # noqa: F401 - the fixture

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(300)

ROUNDS = 5
ANSWER = "both: worked(worker1): go A + worked(worker2): go B"


def _server(directory: Path, swarm: str, port: int, store: DurableStore) -> ServerProcess:
    config = write_config(directory, port=port, swarm=swarm)
    env = {**store.env, "MAIL_STUB_LATENCY_MS": "80"}
    return ServerProcess(directory, port, args=["--config", str(config)], env=env)


def _post_and_kill(server: ServerProcess, key: str, task_id: str, delay: float) -> None:
    """Start the task and kill the server `delay` seconds after the request was sent."""
    assert server.proc is not None
    killer = threading.Timer(delay, server.proc.kill)
    try:
        with httpx.stream(
            "POST",
            f"{server.base_url}/message",
            json={"body": "FANOUT go", "task_id": task_id, "stream": True},
            headers=auth(key),
            timeout=30,
        ) as response:
            killer.start()
            assert response.status_code == 200
            for _ in response.iter_lines():
                pass
    except httpx.HTTPError:
        pass  # the server died under the stream
    finally:
        killer.join()
        server.proc.kill()  # kill -9 (if the task ended first: the kill comes after it)
        server.proc.wait(10)


def _continue(server: ServerProcess, key: str, task_id: str) -> dict[str, object] | None:
    """The task's record once it completed on the restarted server (None: never stored)."""
    deadline = time.monotonic() + 60
    while True:
        r = httpx.get(
            f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
        )
        if r.status_code == 404:
            return None  # killed before the task's first write was committed
        assert r.status_code == 200, r.text
        record = r.json()
        if record["completed"]:
            return record  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"task did not continue: {record}"
        time.sleep(0.05)


def test_task_killed_at_random_points_completes_from_its_journal(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("MAIL_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    swarm = f"durable-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    continued = 0
    for round_ in range(ROUNDS):
        where = f"seed {seed}, round {round_}"
        task_id = str(uuid.uuid4())
        delay = rng.uniform(0.0, 0.4)
        _post_and_kill(_server(tmp_path, swarm, port, durable_store).start(), key, task_id, delay)
        second = _server(tmp_path, swarm, port, durable_store).start()
        try:
            record = _continue(second, key, task_id)
        finally:
            assert second.stop() == 0, second.logs()
        if record is None:
            continue
        continued += 1
        events: list[dict[str, str]] = record["events"]  # type: ignore[assignment]
        # The answer, once (the supervisor's task_complete call ran to its end once).
        answers = [e for e in events if e["event"] == "task_complete_call"]
        assert len(answers) == 1, (where, delay, events)
        assert any(ANSWER in e["data"] for e in events), (where, delay, events)
        ids = [int(e["id"]) for e in events]
        assert ids == list(range(1, len(ids) + 1)), (where, ids)
        assert _stored_event_ids(durable_store, swarm, task_id) == ids, where
        histories = _histories(durable_store, swarm, task_id)
        for worker in ("worker1", "worker2"):
            incoming = [
                h for h in histories[worker] if "<incoming_message>" in str(h.get("content", ""))
            ]
            assert len(incoming) == 1, (where, worker, histories[worker])
        assert json.dumps(histories["supervisor"]).count("FANOUT go") == 1, where
        journal = durable_store.fetch(
            "SELECT items FROM task_queues WHERE swarm_name = $1 AND task_id = $2",
            swarm,
            f"{task_id}::journal",
        )
        assert journal == [], (where, journal)
    assert continued, f"seed {seed}: every kill came before the task was stored"
