"""A peer's keyed ``POST /interswarm/forward`` or ``/back`` whose server dies after the
message was stored and before the key's outcome was: the router's retry, once the key is
taken over, must not hand the message to the agents a second time.

The key is taken (committed) before the route runs, the message is stored with its task, then
the outcome. A kill -9 between the last two leaves the key unfinished; once
`idempotency_takeover_after` (3 s here) has passed, the retry runs the route again. The
envelope's ``message_id`` was only remembered in memory, so after the restart the same
message was queued again: the agent answered it twice (a second turn, a second model call).
Deterministic on PostgreSQL (`tests.support.held_outcome` holds the outcome until the kill).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.held_outcome import cut_by_kill_9, retry, rows
from tests.support.interswarm_agents import swarm_json
from tests.support.peer_envelopes import request_envelope
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from mail.core.events import TaskEvent
from mail.net.bridge_inbound import already_received
from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(300)

TAKEOVER = "idempotency_takeover_after = 3\n"
RECEIVED = (
    "SELECT count(*) AS n FROM task_events WHERE task_id = '{task}' "
    "AND event_type = 'interswarm_message_received'"
)
# The supervisor's turns on the task: one per message it was handed.
TURNS = (
    "SELECT count(*) AS n FROM task_events WHERE task_id = '{task}' "
    "AND event_type = 'new_message' AND event_data LIKE '%{message}%'"
)


class Server:
    """swarm-alpha on its own PostgreSQL schema, started again after a kill -9."""

    def __init__(self, directory: Path, url: str) -> None:
        (directory / "swarms.json").write_text(
            json.dumps(swarm_json("swarm-alpha", "swarm-beta")), encoding="utf-8"
        )
        self.key = create_key(directory / "registries" / "keys.json", "agent", "peer-x")
        self.directory, self.url = directory, url
        self.server = self.start()

    def start(self) -> ServerProcess:
        port = free_port()
        config = write_config(self.directory, port=port, swarm="swarm-alpha", extra=TAKEOVER)
        env = {"DATABASE_URL": self.url}
        return ServerProcess(self.directory, port, args=["--config", str(config)], env=env).start()


@pytest.fixture
def alpha(tmp_path: Path) -> Iterator[Server]:
    with scratch_schema("mail_idem_isw_takeover", BASE_URL) as schema:
        made = Server(tmp_path, with_search_path(BASE_URL, schema))
        try:
            yield made
        finally:
            made.server.stop()


def test_a_forward_cut_by_a_kill_9_is_handed_to_the_agents_once(alpha: Server) -> None:
    task_id = str(uuid.uuid4())
    envelope: dict[str, Any] = request_envelope(
        task_id,
        source="swarm-gamma",
        target="swarm-alpha",
        owner="user:z@swarm-gamma",
        sender={"address_type": "agent", "address": "supervisor@swarm-gamma"},
        recipient="supervisor",
        subject="work",
        body="count me once",
    )
    body = {"message": envelope}
    headers = {**auth(alpha.key), "Idempotency-Key": f'"{uuid.uuid4()}"'}
    cut_by_kill_9(alpha.server, alpha.url, "POST", "/interswarm/forward", body, headers)
    # The first attempt's message is stored with its task (what the retry must not repeat).
    assert rows(alpha.url, RECEIVED.format(task=task_id))[0]["n"] == 1
    alpha.server = alpha.start()

    answer = retry(alpha.server, "POST", "/interswarm/forward", body, headers)

    assert answer.status_code == 200, answer.text
    assert answer.json()["task_id"] == task_id
    # The restarted instance picks the stored message up again and finishes its turn; a
    # second delivery would add a second receipt and a second turn on it.
    settled = _settled(alpha, task_id, envelope["message_id"])
    assert settled == (1, 1), settled  # (2, 2) before: received again, a second turn


def _settled(alpha: Server, task_id: str, message_id: str) -> tuple[int, int]:
    """(receipts, turns) of the message once the task went quiet: read until two reads a
    second apart agree and the agent has taken its turn."""
    deadline = time.monotonic() + 60
    last: tuple[int, int] | None = None
    while True:
        now = (
            rows(alpha.url, RECEIVED.format(task=task_id))[0]["n"],
            rows(alpha.url, TURNS.format(task=task_id, message=message_id))[0]["n"],
        )
        if now == last and now[1] >= 1:
            return now
        assert time.monotonic() < deadline, (now, alpha.server.logs())
        last = now
        time.sleep(1.0)


class _Journal:
    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self._entries = entries

    def entries(self, task_id: str) -> list[dict[str, Any]]:
        return self._entries if task_id == "t1" else []


class _Task:
    def __init__(self, events: list[TaskEvent]) -> None:
        self.task_id = "t1"
        self.events = events


def _message(message_id: str) -> dict[str, Any]:
    return {"id": message_id, "message": {"task_id": "t1"}, "msg_type": "request"}


def test_a_message_is_known_while_pending_and_once_handed_to_an_agent() -> None:
    """Both places a restarted task keeps a peer's message: its journal (queued, or in an
    agent's inbox) until a turn took it, then the ``new_message`` event of that turn."""
    handed = TaskEvent("new_message", "t1", "sending message", {"full_message": _message("m2")})
    other = TaskEvent("interswarm_message_received", "t1", "received", {})
    task = _Task([other, handed])
    journal = _Journal([{"kind": "mailbox", "message": _message("m1")}])
    assert already_received(journal, task, "m1")  # pending
    assert already_received(journal, task, "m2")  # handed to an agent
    assert already_received(None, task, "m2")  # (a runtime without a store: no journal)
    assert not already_received(journal, task, "m3")
    assert not already_received(None, _Task([other]), "m1")
