"""A task nobody subscribed to writes no webhook outbox row: a real `mail server` on SQLite.

A trigger added to the server's own file counts every row written to the outbox
(``webhook_events``; fan-out deletes them, so the table itself stays near empty). Tasks of
callers without a subscription add none; each subscription (made before a restart, changed,
per-request, an admin's ``scope: "all"``) makes its tasks write theirs, and they arrive.
The mirror's rules in detail: tests/test_webhooks_interest.py.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.webhook_receiver import ReceiverProcess
from tests.support.webhook_swarm import webhook_swarms_json

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(240)

WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
poll_interval = 0.2
"""

PROBE = """
CREATE TABLE probe_outbox (caller_id TEXT, task_id TEXT, event_type TEXT);
CREATE TRIGGER probe_outbox_insert AFTER INSERT ON webhook_events BEGIN
    INSERT INTO probe_outbox VALUES (NEW.caller_id, NEW.task_id, NEW.event_type);
END;
"""


class Server:
    def __init__(self, root: Path, receiver: ReceiverProcess) -> None:
        self.root, self.receiver = root, receiver
        self.port = free_port()
        config = write_config(root, port=self.port, swarm="hooks", extra=WEBHOOKS)
        self.args = ["--config", str(config)]
        keys_file = root / "registries" / "keys.json"
        self.keys = {u: create_key(keys_file, "user", u) for u in ("alice", "bob", "carol")}
        self.keys["root"] = create_key(keys_file, "admin", "root")
        self.proc: ServerProcess | None = None

    def start(self) -> None:
        self.proc = ServerProcess(self.root, self.port, args=self.args).start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def call(self, user: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        assert self.proc is not None
        return httpx.request(
            method, self.proc.base_url + path, headers=auth(self.keys[user]), timeout=60, **kwargs
        )

    def subscribe(self, user: str, path: str, **body: Any) -> str:
        r = self.call(user, "POST", "/webhooks", json={"url": self.receiver.url(path), **body})
        assert r.status_code == 201, r.text
        self.receiver.secrets(path, r.json()["secret"])
        return str(r.json()["id"])

    def task(self, user: str, **extra: Any) -> dict[str, Any]:
        # Answered once stored, its outbox row (if any) in the same transaction.
        r = self.call(user, "POST", "/message", json={"body": "hello", **extra})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def rows(self) -> list[tuple[str, str, str]]:
        with sqlite3.connect(self.root / "data" / "mail.db", timeout=30) as db:
            found = db.execute("SELECT caller_id, task_id, event_type FROM probe_outbox").fetchall()
        db.close()
        return [tuple(r) for r in found]  # type: ignore[misc]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "swarms.json").write_text(json.dumps(webhook_swarms_json("hooks")))
    receiver = ReceiverProcess(free_port(), tmp_path).start()
    found = Server(tmp_path, receiver)
    try:
        yield found
    finally:
        found.stop()
        receiver.stop()


def _task_ids(receiver: ReceiverProcess, path: str, count: int) -> list[str]:
    got = receiver.wait_for(count, path)
    assert len(got) == count and all(g["verified"] for g in got), got
    return [ReceiverProcess.payload(g)["data"]["task_id"] for g in got]


def test_only_tasks_a_subscription_can_match_write_outbox_rows(server: Server) -> None:
    server.start()
    alice_hook = server.subscribe("alice", "/alice", events=["task.completed"])
    server.stop()
    with sqlite3.connect(server.root / "data" / "mail.db") as db:
        db.executescript(PROBE)
    db.close()
    server.start()  # alice's webhook is read back from the file

    for _ in range(3):
        server.task("bob")
    assert server.rows() == []  # nobody subscribed to bob's tasks
    task = server.task("alice")["task_id"]
    assert server.rows() == [("alice", task, "task.completed")]
    assert _task_ids(server.receiver, "/alice", 1) == [task]

    # A webhook for other event types: still no row; changed to cover them: rows, delivered.
    bob_hook = server.subscribe("bob", "/bob", events=["task.failed"])
    server.task("bob")
    assert len(server.rows()) == 1
    r = server.call("bob", "PATCH", f"/webhooks/{bob_hook}", json={"events": ["task.*"]})
    assert r.status_code == 200, r.text
    task = server.task("bob")["task_id"]
    assert server.rows()[1:] == [("bob", task, "task.completed")]
    assert _task_ids(server.receiver, "/bob", 1) == [task]
    # Disabled, then deleted: no row again.
    r = server.call("bob", "PATCH", f"/webhooks/{bob_hook}", json={"active": False})
    assert r.status_code == 200, r.text
    server.task("bob")
    assert server.call("bob", "DELETE", f"/webhooks/{bob_hook}").status_code == 204
    assert server.call("alice", "DELETE", f"/webhooks/{alice_hook}").status_code == 204
    server.task("bob")
    server.task("alice")
    assert len(server.rows()) == 2

    # A per-request webhook: its own task's row only, delivered.
    secret = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"
    server.receiver.secrets("/carol", secret)
    hook = {"url": server.receiver.url("/carol"), "secret": secret}
    task = server.task("carol", webhook=hook)["task_id"]
    server.task("carol")
    assert server.rows()[2:] == [("carol", task, "task.completed")]
    assert _task_ids(server.receiver, "/carol", 1) == [task]

    # An admin's scope "all": every caller's tasks.
    everyone = server.subscribe("root", "/everyone", events=["*"], scope="all")
    task = server.task("bob")["task_id"]
    assert server.rows()[3:] == [("bob", task, "task.completed")]
    assert _task_ids(server.receiver, "/everyone", 1) == [task]
    assert server.call("root", "DELETE", f"/webhooks/{everyone}").status_code == 204
    server.task("bob")
    assert len(server.rows()) == 4
