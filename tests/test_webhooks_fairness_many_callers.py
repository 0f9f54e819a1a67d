"""Many callers whose receivers hang cannot take every delivery slot: a caller with nothing
under way gets one at once.

docs/webhooks.md: of the `max_in_flight` (32) slots, `max_in_flight_reserved` (half) go only
to callers with nothing under way, so callers with attempts under way hold at most 16 and one
more each. A real `mail server` (SQLite, the default slots, `timeout` 4 s here so the hanging
attempts end and are claimed again while the test runs), one receiver process listening on
10 ports that takes every delivery and never answers, and another that answers at once.
Eight attackers (twice as many as fill every slot at 8 each) make 10 webhooks each (one per
port) and send 2 tasks each: hundreds of deliveries, each holding its slot for the whole
timeout. The victim's deliveries must arrive within 1 s of its answer, while the attackers
hold their slots and again after their attempts timed out and were claimed anew. (Four
callers with hanging receivers took all 32 slots: the victim waited for the next timeout.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import ServerProcess, auth, free_port, keyed_stub_server

pytestmark = pytest.mark.timeout(300)

TIMEOUT = 4.0  # [server.webhooks] timeout: how long a hanging attempt holds its slot
WEBHOOKS = f'\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\ntimeout = {TIMEOUT}\n'
ATTACKERS = 8
USERS = {f"mallory{i}": ("user", f"mallory{i}") for i in range(ATTACKERS)} | {
    "victor": ("user", "victor")
}
DEAD_PORTS = 10
TASKS_EACH = 2
# [server.webhooks] max_in_flight (32) less max_in_flight_reserved (half): what the attackers
# hold at least once their deliveries are claimed.
HELD = 16
LAG = 1.0


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ReceiverProcess, ReceiverProcess]]:
    root = tmp_path_factory.mktemp("fairness-many")
    ports = tuple(free_port() for _ in range(DEAD_PORTS))
    dead = ReceiverProcess(ports[0], root, more_ports=ports[1:]).start()
    live = ReceiverProcess(free_port(), root).start()
    try:
        dead.script("/dead", [], delay=3600)  # takes the request, never answers
        with keyed_stub_server(root, USERS, extra=WEBHOOKS) as server:
            yield server, dead, live
    finally:
        dead.stop()
        live.stop()


def _arrival(receiver: ReceiverProcess, task_id: str, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in receiver.received("/victor"):
            if task_id in entry["body"]:
                return float(entry["at"])
        time.sleep(0.02)
    return None


async def _hanging(dead: ReceiverProcess, count: int) -> None:
    """Until `count` of the attackers' attempts reached their receivers (each hangs)."""
    deadline = time.monotonic() + 60
    while len(dead.received("/dead")) < count:
        assert time.monotonic() < deadline, len(dead.received("/dead"))
        await asyncio.sleep(0.05)


async def test_callers_with_hanging_receivers_leave_a_slot_for_a_caller_with_none(
    setup: tuple[ServerProcess, ReceiverProcess, ReceiverProcess],
) -> None:
    server, dead, live = setup
    victor = auth(server.keys["victor"])
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as http:
        for i in range(ATTACKERS):
            mallory = auth(server.keys[f"mallory{i}"])
            for port in (dead.port, *dead.more_ports):
                url = f"http://127.0.0.1:{port}/dead"
                r = await http.post(
                    "/webhooks", json={"url": url, "events": ["*"]}, headers=mallory
                )
                assert r.status_code == 201, r.text
        r = await http.post(
            "/webhooks",
            json={"url": live.url("/victor"), "events": ["task.completed"]},
            headers=victor,
        )
        assert r.status_code == 201, r.text
        flood = await asyncio.gather(
            *(
                http.post("/message", json={"body": f"flood {n}"}, headers=auth(server.keys[who]))
                for who in USERS
                if who != "victor"
                for n in range(TASKS_EACH)
            )
        )
        assert all(r.status_code == 200 for r in flood), [r.text for r in flood]

        lags: dict[str, float] = {}

        async def victims_deliveries(phase: str) -> None:
            for n in range(2):
                r = await http.post("/message", json={"body": f"{phase} {n}"}, headers=victor)
                answered = time.time()
                assert r.status_code == 200, r.text
                at = await asyncio.to_thread(_arrival, live, r.json()["task_id"], 60)
                lags[f"{phase} {n}"] = (at or float("inf")) - answered

        # The attackers hold their slots (every one of them, before the fix)...
        await _hanging(dead, HELD)
        await victims_deliveries("while they hang")
        # ... and take them again once those attempts timed out.
        await _hanging(dead, 3 * HELD)
        await victims_deliveries("after a timeout")
    assert max(lags.values()) <= LAG, lags
    # The backlog outlasts the test: the attackers had deliveries waiting all along.
    assert len(dead.received("/dead")) < ATTACKERS * TASKS_EACH * DEAD_PORTS
