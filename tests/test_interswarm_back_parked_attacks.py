"""Attacks on the answers kept for an owner who has not come back since a restart
(`mail.server.parked_answers`; the plain cases: tests/test_interswarm_back_parked.py), on the
default SQLite store. Each failed before its fix (found by an attack round):

- answers the owner's instance would refuse (another swarm's sender, a system sender, a
  peer's user who does not own the task, the swarm's own name as recipient, a malformed
  contributor) were told 200 "delivered" while it was away, then dropped when it loaded;
- many different answers at once: the per-task lock was dropped between its holder and the
  next, two kept at once and one overwrote the other (16 to 22 of 96 lost after a 200);
- the owner's request racing an answer being kept: the answer was handed over, its kept
  row stayed for good;
- an answer of many bytes: kept without a byte bound (40 answers of 3.9 MB took the server
  to 4 GB when the owner came back).
A kill -9 while the owner's instance takes what was kept held up: the answer arrives once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.restarted_alpha import NOT_RESUMED, Alpha, alpha_on_sqlite, answer_envelope
from tests.test_interswarm_back_parked import (
    _alice_asks_beta_then_crash,
    _answer_of,
    _back,
    _kept,
    _until,
)

from mail.server import parked_answers
from mail.store.base import InstanceKey

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def alpha(tmp_path: Path) -> Iterator[Alpha]:
    with alpha_on_sqlite(
        tmp_path, settings=NOT_RESUMED + "max_parked_bytes_per_task = 60000\n"
    ) as made:
        yield made


def _refused_kinds(question: dict[str, Any]) -> dict[str, dict[str, Any]]:
    base = answer_envelope(question, "bad")
    made: dict[str, dict[str, Any]] = {}
    for name, change in (
        ("sender of another swarm", {"sender": {"address_type": "agent", "address": "spy@swarm-gamma"}}),
        ("system sender", {"sender": {"address_type": "system", "address": "system@swarm-beta"}}),
        ("a peer user who does not own the task", {"sender": {"address_type": "user", "address": "mallory@swarm-beta"}}),
        ("the swarm's name as recipient", {"recipient": {"address_type": "agent", "address": "swarm-alpha@swarm-alpha"}}),
    ):  # fmt: skip
        envelope = copy.deepcopy(base)
        envelope["payload"].update(change)
        made[name] = envelope
    envelope = copy.deepcopy(base)
    envelope["task_contributors"] = [*envelope["task_contributors"], "not-a-contributor"]
    made["a malformed contributor"] = envelope
    for envelope in made.values():
        envelope["message_id"] = str(uuid.uuid4())
    return made


def test_what_the_instance_refuses_is_refused_while_it_is_away(alpha: Alpha) -> None:
    question = _alice_asks_beta_then_crash(alpha)
    task_id = question["payload"]["task_id"]
    kinds = _refused_kinds(question)

    away = {name: _back(alpha, envelope).status_code for name, envelope in kinds.items()}
    assert _kept(alpha, task_id) == []

    assert alpha.get("alice", "/tasks").status_code == 200  # loads alice's instance
    loaded = {}
    for name, envelope in kinds.items():
        again = {**copy.deepcopy(envelope), "message_id": str(uuid.uuid4())}
        loaded[name] = _back(alpha, again).status_code
    assert away == loaded, "away vs loaded"
    assert all(code in (400, 403) for code in away.values()), away


def test_answers_sent_at_once_are_all_kept(alpha: Alpha) -> None:
    question = _alice_asks_beta_then_crash(alpha)
    task_id = question["payload"]["task_id"]
    answers = [answer_envelope(question, f"a{n}") for n in range(36)]

    codes: list[int] = []
    for burst in range(0, len(answers), 12):  # 12 at once, three times
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            codes += pool.map(lambda e: _back(alpha, e).status_code, answers[burst : burst + 12])
    told = {a["message_id"] for a, code in zip(answers, codes, strict=True) if code == 200}
    assert len(told) == len(answers), codes
    assert told == {k["envelope"]["message_id"] for k in _kept(alpha, task_id)}


async def test_the_task_lock_has_one_holder_at_a_time() -> None:
    """A holds it, B waits; A releases (B woken, not yet holding) and C comes right after:
    C must wait for B, not make a lock of its own."""
    key = InstanceKey("swarm-alpha", "user", "alice")
    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    later: list[asyncio.Task[None]] = []

    async def worker(name: str) -> None:
        async with parked_answers._task_lock(key, "t"):
            inside.append(name)
            if len(inside) > 1:
                overlaps.append(tuple(inside))
            await asyncio.sleep(0.05)
            inside.remove(name)
        if name == "A":
            later.append(asyncio.create_task(worker("C")))

    first = asyncio.create_task(worker("A"))
    await asyncio.sleep(0.01)
    await asyncio.gather(first, worker("B"))
    await asyncio.gather(*later)
    assert overlaps == []
    assert parked_answers._locks == {}  # nothing left behind


def test_the_owner_coming_back_while_an_answer_is_kept(alpha: Alpha) -> None:
    for turn in range(3):
        if turn:
            alpha.kill_and_restart()  # alice's instance is not loaded again
        alpha.peer.received.clear()
        question = _alice_asks_beta_then_crash(alpha)
        task_id = question["payload"]["task_id"]
        answer = answer_envelope(question, f"race-{turn}")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            back = pool.submit(_back, alpha, answer)
            owner = pool.submit(alpha.get, "alice", "/tasks")
            assert (back.result().status_code, owner.result().status_code) == (200, 200)
        assert _answer_of(alpha, task_id) == f"alpha got: race-{turn}"
        _until(lambda t=task_id: not _kept(alpha, t), f"turn {turn}: the kept row stayed")
        assert alpha.calls_with(f"<body>race-{turn}</body>") == 1


@pytest.mark.parametrize("after", [0.0, 0.03, 0.1])
def test_a_kill_while_the_owner_takes_what_was_kept(alpha: Alpha, after: float) -> None:
    question = _alice_asks_beta_then_crash(alpha)
    task_id = question["payload"]["task_id"]
    answer = answer_envelope(question, "crashy")
    assert _back(alpha, answer).status_code == 200

    loading = threading.Event()

    def owner() -> None:
        loading.set()
        try:
            alpha.get("alice", "/tasks")  # loads her instance, which takes the answer
        except httpx.HTTPError:
            pass  # cut by the kill

    threading.Thread(target=owner, daemon=True).start()
    loading.wait(10)
    time.sleep(after)  # the moment of the kill is what varies
    alpha.kill_and_restart()

    assert _answer_of(alpha, task_id) == "alpha got: crashy"
    events = alpha.get("alice", f"/task?task_id={task_id}").json()["events"]
    received = [e for e in events if e.get("event") == "interswarm_message_received"]
    handed = [
        e
        for e in events
        if e.get("event") == "new_message" and answer["message_id"] in json.dumps(e)
    ]
    assert (len(received), len(handed)) == (1, 1)


def test_kept_bytes_are_bounded(alpha: Alpha) -> None:
    question = _alice_asks_beta_then_crash(alpha)
    task_id = question["payload"]["task_id"]

    huge = _back(alpha, answer_envelope(question, "x" * 70_000))  # max_parked_bytes 60000
    assert huge.status_code == 413, huge.text
    assert "max_parked_bytes_per_task" in huge.json()["detail"]
    codes = [_back(alpha, answer_envelope(question, "y" * 20_000)).status_code for _ in range(3)]
    assert codes == [200, 200, 503], codes  # some 20.8 kB each kept
    assert sum(len(json.dumps(k)) for k in _kept(alpha, task_id)) <= 60_000
