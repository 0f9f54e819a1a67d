"""The per-caller storage quotas hold for ``POST /interswarm/message`` too.

A user's interswarm message starts a task in the caller's own instance, stored like any other
(docs/database.md#quotas-per-caller); it was let in past ``max_stored_tasks_per_caller`` and
``max_stored_bytes_per_caller``, so a caller refused on ``POST /message`` kept storing tasks
by sending them this way. A real `mail server` with interswarm on (its peer is not running:
every message gets the router's error answer, and its task is stored all the same).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from tests.support.interswarm_server import alpha_server
from tests.support.peer_envelopes import forward_new_task

from server_fixtures import ServerProcess, auth

pytestmark = pytest.mark.timeout(240)

STORE = """interswarm_timeout = 3.0

[server.store]
max_stored_tasks_per_caller = 2
max_stored_bytes_per_caller = 200000
"""

KEYS = {"ivy": ("user", "ivy"), "ike": ("user", "ike"), "peer": ("agent", "peer-x")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with alpha_server(tmp_path_factory.mktemp("interswarm_quota"), KEYS, extra=STORE) as srv:
        yield srv


def _interswarm(server: ServerProcess, who: str, body: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/interswarm/message",
        json={"body": body, "targets": ["supervisor@swarm-beta"], "timeout": 30},
        headers=auth(server.keys[who]),
        timeout=60,
    )


def _task_count(server: ServerProcess, who: str) -> int:
    found = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys[who]), timeout=30)
    assert found.status_code == 200, found.text
    return len(found.json())


def test_interswarm_messages_stop_at_the_stored_task_bound(server: ServerProcess) -> None:
    first = httpx.post(
        f"{server.base_url}/message",
        json={"body": "hello"},
        headers=auth(server.keys["ivy"]),
        timeout=60,
    )
    assert first.status_code == 200, first.text
    second = _interswarm(server, "ivy", "one more")
    assert second.status_code == 200, second.text
    assert _task_count(server, "ivy") == 2
    for _ in range(3):
        refused = _interswarm(server, "ivy", "past the bound")
        assert refused.status_code == 429, refused.text
        assert "max_stored_tasks_per_caller = 2" in refused.json()["detail"]
    assert _task_count(server, "ivy") == 2
    # The bound is the caller's own: another caller is not refused.
    assert _interswarm(server, "ike", "mine").status_code == 200


def test_an_interswarm_message_past_the_stored_byte_bound_is_refused(
    server: ServerProcess,
) -> None:
    refused = _interswarm(server, "ike", "x" * 250_000)
    assert refused.status_code == 429, refused.text
    assert "max_stored_bytes_per_caller = 200000" in refused.json()["detail"]
    assert _task_count(server, "ike") == 1


def test_a_peer_forwarding_new_tasks_stops_at_the_stored_task_bound(
    server: ServerProcess,
) -> None:
    started = [str(uuid.uuid4()) for _ in range(2)]
    for task_id in started:
        accepted = forward_new_task(server, task_id)
        assert accepted.status_code == 200, accepted.text
    # Its tasks run in the background (their answers go to a swarm that is not there):
    # they count while they run, as a caller's own running tasks do.
    refused = forward_new_task(server, str(uuid.uuid4()))
    assert refused.status_code == 429, refused.text
    assert "max_stored_tasks_per_caller = 2" in refused.json()["detail"]
    # A message to a task the peer already has here is not a new task.
    again = forward_new_task(server, started[0])
    assert again.status_code == 200, again.text
