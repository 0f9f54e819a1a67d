"""One caller's dead receivers delay only that caller: delivery slots are shared fairly.

A real `mail server` (SQLite, the default delivery settings: 32 attempts under way, 4 per
host:port, 8 per caller, 15 s per attempt), one receiver process listening on 20 ports that
takes every delivery and never answers, and another that answers at once. The attacker
makes 20 webhooks, one per port of the first, and sends 20 tasks in 0.1 s: hundreds of
deliveries, each holding its slot for the whole timeout. The other caller's deliveries (a
webhook, a message's own webhook, an A2A push notification: they share the queue) must
still arrive within 1 s of their answer, and the attacker's receivers hold no more than its
share. (Claimed first in first out over every caller, they came 178 s late.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from a2a.types.a2a_pb2 import SendMessageConfiguration, TaskPushNotificationConfig
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import ServerProcess, auth, free_port, keyed_stub_server
from support.a2a_clients import a2a_client, collect, message

pytestmark = pytest.mark.timeout(300)

WEBHOOKS = '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'
USERS = {"mallory": ("user", "mallory"), "victor": ("user", "victor")}
DEAD_PORTS = 20
SHARE = 8  # [server.webhooks] max_in_flight_per_owner (the default)
LAG = 1.0


class Setup:
    def __init__(self, server: ServerProcess, dead: ReceiverProcess, live: ReceiverProcess):
        self.server, self.dead, self.live = server, dead, live


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("fairness")
    ports = tuple(free_port() for _ in range(DEAD_PORTS))
    dead = ReceiverProcess(ports[0], root, more_ports=ports[1:]).start()
    live = ReceiverProcess(free_port(), root).start()
    try:
        dead.script("/dead", [], delay=3600)  # takes the request, never answers
        with keyed_stub_server(root, USERS, extra=WEBHOOKS) as server:
            yield Setup(server, dead, live)
    finally:
        dead.stop()
        live.stop()


def _arrival(receiver: ReceiverProcess, path: str, task_id: str, timeout: float) -> float | None:
    """When the first delivery naming `task_id` reached `path` (the receiver's clock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in receiver.received(path):
            if task_id in entry["body"]:
                return float(entry["at"])
        time.sleep(0.02)
    return None


async def test_a_callers_hanging_receivers_do_not_delay_another_callers_deliveries(
    setup: Setup,
) -> None:
    server = setup.server
    base = server.base_url
    mallory, victor = auth(server.keys["mallory"]), auth(server.keys["victor"])
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        for port in (setup.dead.port, *setup.dead.more_ports):
            url = f"http://127.0.0.1:{port}/dead"
            r = await http.post("/webhooks", json={"url": url, "events": ["*"]}, headers=mallory)
            assert r.status_code == 201, r.text
        r = await http.post(
            "/webhooks",
            json={"url": setup.live.url("/victor"), "events": ["task.completed"]},
            headers=victor,
        )
        assert r.status_code == 201, r.text
        # 20 tasks in 0.1 s: 20 webhooks each, every one an attempt that hangs for 15 s.
        sent = time.monotonic()
        flood = await asyncio.gather(
            *(
                http.post("/message", json={"body": f"flood {i}"}, headers=mallory)
                for i in range(20)
            )
        )
        assert all(r.status_code == 200 for r in flood), [r.text for r in flood]
        # The attacker's share of the slots is taken (its attempts reached the receiver).
        deadline = time.monotonic() + 30
        while len(setup.dead.received("/dead")) < SHARE:
            assert time.monotonic() < deadline, setup.dead.received("/dead")
            await asyncio.sleep(0.05)

        lags: dict[str, float] = {}
        for i in range(3):
            r = await http.post("/message", json={"body": f"mine {i}"}, headers=victor)
            answered = time.time()
            assert r.status_code == 200, r.text
            at = await asyncio.to_thread(_arrival, setup.live, "/victor", r.json()["task_id"], 10)
            lags[f"webhook {i}"] = (at or float("inf")) - answered
        r = await http.post(
            "/message",
            json={"body": "my own hook", "webhook": {"url": setup.live.url("/once")}},
            headers=victor,
        )
        answered = time.time()
        assert r.status_code == 200, r.text
        at = await asyncio.to_thread(_arrival, setup.live, "/once", r.json()["task_id"], 10)
        lags["message webhook"] = (at or float("inf")) - answered

    # A2A push notifications go through the same queue.
    request = message("pushed to me")
    request.configuration.CopyFrom(
        SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig(url=setup.live.url("/a2a"))
        )
    )
    async with a2a_client(base, server.keys["victor"], streaming=False) as client:
        events = await collect(client, request)
    answered = time.time()
    task_id = events[-1].task.id
    at = await asyncio.to_thread(_completed_push, setup.live, task_id, 10)
    lags["a2a push"] = (at or float("inf")) - answered

    assert max(lags.values()) <= LAG, lags
    # Meanwhile (well within one 15 s attempt) the attacker held its share of the slots only.
    assert time.monotonic() - sent < 15, "too slow to tell the share from the timeout"
    assert len(setup.dead.received("/dead")) <= SHARE, len(setup.dead.received("/dead"))


def _completed_push(receiver: ReceiverProcess, task_id: str, timeout: float) -> float | None:
    """When the push saying `task_id` completed arrived (a status update or the task)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in receiver.received("/a2a"):
            if task_id in entry["body"] and "TASK_STATE_COMPLETED" in entry["body"]:
                return float(entry["at"])
        time.sleep(0.02)
    return None
