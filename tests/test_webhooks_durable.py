"""Webhook deliveries survive kill -9: a real `mail server` on SQLite (the default) and on
PostgreSQL, its receiver down meanwhile.

Each task's answer is acknowledged only once it is stored; its outbox row is stored in the
same transaction. The server is killed (SIGKILL) right after the last answer, with deliveries
still in the outbox, pending or being retried. After the receiver and the server come back,
every event arrives, each delivery with the `webhook-id` it had before the kill.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.pg_schema import scratch_schema, with_search_path
from tests.support.store_backends import DurableStore, durable_store  # noqa: F401 - fixture
from tests.support.webhook_receiver import ReceiverProcess
from tests.support.webhook_swarm import webhook_swarms_json
from tests.test_persistence_e2e import database  # noqa: F401 - the fixture

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(240)

WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]
poll_interval = 0.2
timeout = 2.0
connect_timeout = 1.0
"""

TASKS = 5


def _server(directory: Path, port: int, store: DurableStore) -> ServerProcess:
    config = write_config(directory, port=port, swarm="hooks", extra=WEBHOOKS)
    return ServerProcess(directory, port, args=["--config", str(config)], env=store.env)


@pytest.fixture
def store(durable_store: DurableStore) -> Iterator[DurableStore]:  # noqa: F811
    """The durable store, PostgreSQL in a schema of its own (the shared database may hold
    other runs' rows, or other tests' tables)."""
    if durable_store.kind != "postgres":
        yield durable_store
        return
    with scratch_schema("webhooks_kill") as schema:
        url = with_search_path(durable_store.database_url or "", schema)
        yield DurableStore("postgres", durable_store.directory, url)


def test_deliveries_survive_kill_9_while_the_receiver_is_down(
    store: DurableStore, tmp_path: Path
) -> None:
    (tmp_path / "swarms.json").write_text(json.dumps(webhook_swarms_json("hooks")))
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    headers = auth(key)
    receiver = ReceiverProcess(free_port(), tmp_path)  # not started: the receiver is down
    port = free_port()
    first = _server(tmp_path, port, store).start()
    try:
        r = httpx.post(
            first.base_url + "/webhooks",
            json={"url": receiver.url("/hook"), "events": ["task.completed"]},
            headers=headers,
            timeout=30,
        )
        assert r.status_code == 201, r.text
        secret = r.json()["secret"]
        task_ids = []
        for i in range(TASKS):
            r = httpx.post(
                first.base_url + "/message", json={"body": f"task {i}"}, headers=headers, timeout=30
            )
            assert r.status_code == 200, r.text
            task_ids.append(r.json()["task_id"])
    finally:
        first.proc.kill()  # kill -9 right after the last answer: no shutdown hooks run
        first.proc.wait(10)
    # What the dead server left: each event is an outbox row or a delivery, none lost.
    events = store.fetch("SELECT event_id FROM webhook_events WHERE swarm_name = $1", "hooks")
    before = store.fetch(
        "SELECT delivery_id, event_id, status FROM webhook_deliveries WHERE swarm_name = $1",
        "hooks",
    )
    assert len(events) + len(before) == TASKS, (events, before)
    assert all(row["status"] == "pending" for row in before)

    receiver.start()
    receiver.secrets("/hook", secret)
    second = _server(tmp_path, port, store).start()
    try:
        got = receiver.wait_for(TASKS, "/hook", timeout=60)
        delivered = {ReceiverProcess.payload(g)["data"]["task_id"] for g in got}
        assert delivered == set(task_ids), second.logs()[-3000:]
        assert all(g["verified"] for g in got)
        ids = {g["headers"]["webhook-id"] for g in got}
        # The deliveries made before the kill kept their webhook-id.
        assert {row["delivery_id"] for row in before} <= ids
        time.sleep(0.5)
        assert len({g["headers"]["webhook-id"] for g in receiver.received("/hook")}) == TASKS
    finally:
        second.stop()
        receiver.stop()
