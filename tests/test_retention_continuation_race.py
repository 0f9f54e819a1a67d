"""Retention never removes a finished task under a message that continues it.

A finished task past ``finished_task_ttl`` that got a new message just as a retention batch
ran was read back from the store for the message, then removed by the batch while the
continuation ran from memory: the caller got the continuation's answer (``turn 2``: the
agent had its history) but the store kept only what the continuation wrote, half the task
(5 of its 10 events; 11 to 13 of about 80 continuations in this test). Now a batch and a
task's reading back exclude each other, and the read-back task's record is marked changed
before the next batch.

Real ``mail server`` on SQLite (the default) with a 1 s TTL checked every 10 ms; many tasks
are continued at once, each at the edge of its TTL; every continuation that was answered
must leave its whole task stored (a refused one, 404, met a task already removed: fine).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server

pytestmark = pytest.mark.timeout(600)

TTL = 1.0
WORKERS = 10
ROUNDS = 15
STORE = f"""
[server.store]
finished_task_ttl = {TTL}
prune_interval = 0.01
"""


@pytest.fixture
def server(tmp_path: Any) -> Iterator[ServerProcess]:
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=STORE) as srv:
        yield srv


async def continue_at_the_edge(
    client: httpx.AsyncClient, server: ServerProcess, seed: int
) -> list[tuple[str, int, int]]:
    """(response, status of GET /task, events stored) of each continuation answered."""
    rng = random.Random(seed)
    headers = auth(server.keys["alice"])
    answered: list[tuple[str, int, int]] = []
    for _ in range(ROUNDS):
        first = await client.post(
            f"{server.base_url}/message", json={"body": "COUNT", "subject": "s"}, headers=headers
        )
        assert first.status_code == 200, first.text
        task_id = first.json()["task_id"]
        await asyncio.sleep(TTL - 0.005 + rng.uniform(0, 0.015))  # at the edge of the TTL
        more = await client.post(
            f"{server.base_url}/message",
            json={
                "body": "COUNT",
                "subject": "s",
                "task_id": task_id,
                "resume_from": "user_response",
            },
            headers=headers,
        )
        if more.status_code == 404:
            continue  # removed before the message came: it is for an unknown task
        assert more.status_code == 200, more.text
        found = await client.get(
            f"{server.base_url}/task", params={"task_id": task_id}, headers=headers
        )
        events = len(found.json().get("events", [])) if found.status_code == 200 else 0
        answered.append((more.json()["response"], found.status_code, events))
    return answered


def test_a_continued_task_is_never_half_removed(server: ServerProcess) -> None:
    async def main() -> list[tuple[str, int, int]]:
        async with httpx.AsyncClient(timeout=120) as client:
            runs = await asyncio.gather(
                *(continue_at_the_edge(client, server, seed) for seed in range(WORKERS))
            )
        return [outcome for run in runs for outcome in run]

    answered = asyncio.run(main())
    assert answered, "no continuation was answered: the test did not test anything"
    # The whole task: its first message's events (5) and the continuation's (5).
    broken = [a for a in answered if a[0] != "turn 2" or a[1] != 200 or a[2] != 10]
    assert not broken, f"{len(broken)} of {len(answered)} continued tasks were cut: {broken}"
