"""Callers whose receivers hang can hold every delivery slot, but a slot that comes free goes
to a caller with fewer attempts under way, even one whose delivery fell due behind theirs.

docs/webhooks.md: four callers with hanging receivers can hold all of `max_in_flight`; "then
the others wait for the next free slot, at most `timeout`". A real `mail server` (SQLite,
32 slots, 8 per caller, `timeout` 3 s here), one receiver process listening on 20 ports that
takes every delivery and never answers, and another that answers at once. Four attackers
make 20 webhooks each (one per port) and send 4 tasks each: 320 deliveries, each holding its
slot for the whole timeout. The victim's delivery must arrive within one timeout (and a
little) of its answer. (A claim chose among the first due deliveries only: the slot freed by
an attacker went back to that attacker, whose backlog filled that window, until the whole
backlog had been tried once; the victim's delivery came 20 s and more late.)
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

TIMEOUT = 3.0  # [server.webhooks] timeout: how long a hanging attempt holds its slot
WEBHOOKS = f'\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\ntimeout = {TIMEOUT}\n'
ATTACKERS = 4  # [server.webhooks] max_in_flight / max_in_flight_per_owner (the defaults)
USERS = {f"mallory{i}": ("user", f"mallory{i}") for i in range(ATTACKERS)} | {
    "victor": ("user", "victor")
}
DEAD_PORTS = 20
TASKS_EACH = 4
SLOTS = 32  # [server.webhooks] max_in_flight (the default)


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


async def test_a_freed_slot_goes_to_a_caller_behind_the_hanging_callers_backlog(
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
        # Every slot is taken by an attempt that hangs.
        deadline = time.monotonic() + 30
        while len(dead.received("/dead")) < SLOTS:
            assert time.monotonic() < deadline, len(dead.received("/dead"))
            await asyncio.sleep(0.05)

        lags = []
        for n in range(2):
            r = await http.post("/message", json={"body": f"mine {n}"}, headers=victor)
            answered = time.time()
            assert r.status_code == 200, r.text
            at = await asyncio.to_thread(_arrival, live, r.json()["task_id"], 60)
            lags.append((at or float("inf")) - answered)
    # The backlog ahead of the victim's delivery lasts many timeouts: it must not wait for it.
    assert max(lags) <= TIMEOUT + 1.5, lags
