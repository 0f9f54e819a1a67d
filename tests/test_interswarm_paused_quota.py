"""``[server.settings] max_paused_tasks_per_caller`` holds for tasks that enter through the
interswarm routes too: a peer's ``POST /interswarm/forward`` and a user's
``POST /interswarm/message`` that would start a task are refused with 429 and
``Retry-After`` once the caller holds that many running or paused tasks, as a local
``POST /message`` is; a message to a task that is running is never refused.

A real `mail server` with interswarm on; the tasks stay running on the `sleeper` agent (it
answers after 30 s; the `looper` would stop them after a few empty waits, task_repeat_limit,
so on a loaded machine a task could end before the next request counted it).
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

LIMIT = 2
SETTINGS = f"""interswarm_timeout = 3.0
max_paused_tasks_per_caller = {LIMIT}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with alpha_server(
        tmp_path_factory.mktemp("interswarm_paused"),
        {"ivy": ("user", "ivy"), "peer": ("agent", "peer-x")},
        extra=SETTINGS,
    ) as srv:
        yield srv


def _forward(server: ServerProcess, task_id: str) -> httpx.Response:
    # The sleeper keeps its task running for 30 s (the looper stops a peer's task after a
    # few empty waits: task_repeat_limit).
    return forward_new_task(server, task_id, recipient="sleeper", body="wait for me")


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert f"max_paused_tasks_per_caller = {LIMIT}" in response.json()["detail"]
    assert response.headers.get("Retry-After"), response.headers


def test_a_peer_forwarding_new_tasks_stops_at_the_paused_task_bound(
    server: ServerProcess,
) -> None:
    started = [str(uuid.uuid4()) for _ in range(LIMIT)]
    for task_id in started:
        accepted = _forward(server, task_id)
        assert accepted.status_code == 200, accepted.text
    _refused(_forward(server, str(uuid.uuid4())))
    # A message to a task that is running here is not refused: its work goes on.
    again = _forward(server, started[0])
    assert again.status_code == 200, again.text


def test_a_users_interswarm_message_stops_at_the_paused_task_bound(
    server: ServerProcess,
) -> None:
    with httpx.Client(base_url=server.base_url, headers=auth(server.keys["ivy"])) as client:
        streams = []
        try:
            for _ in range(LIMIT):  # two tasks of ivy's, running on the sleeper (30 s)
                stream = client.stream(
                    "POST",
                    "/message",
                    json={"body": "wait", "entrypoint": "sleeper", "stream": True},
                    timeout=30,
                )
                response = stream.__enter__()
                streams.append(stream)
                assert response.status_code == 200, response.read()
                next(response.iter_lines())  # the task started (and is stored)
            refused = client.post(
                "/interswarm/message",
                json={"body": "one more", "targets": ["supervisor@swarm-beta"], "timeout": 30},
                timeout=60,
            )
            _refused(refused)
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
