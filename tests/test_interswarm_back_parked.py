"""A peer's answer that comes after a restart, before the task's owner made any request, on the
default SQLite store (`mail server` as a user starts it, from a scratch folder).

With ``resume_instances_at_start = 0`` (or for a caller past that bound) the owner's instance
is loaded only at the owner's next request; until then a peer's ``POST /interswarm/back`` is checked against the stored task, kept
in the store with it (``task_queues`` row ``<task_id>::parked``) before the 200, and handed to
the instance once it is loaded (`mail.server.parked_answers`). Before, it was refused 404 and
lost. The PostgreSQL side: tests/test_idempotency_interswarm_back_restart.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.restarted_alpha import (
    NOT_RESUMED,
    Alpha,
    alpha_on_sqlite,
    answer_envelope,
    post_in_background,
)

from server_fixtures import auth, create_key

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def alpha(tmp_path: Path) -> Iterator[Alpha]:
    with alpha_on_sqlite(
        tmp_path, settings=NOT_RESUMED + "max_parked_answers_per_task = 2\n"
    ) as made:
        yield made


def _rows(alpha: Alpha, sql: str, *args: Any) -> list[sqlite3.Row]:
    """A query on the server's SQLite file, read-only beside the running server (WAL)."""
    path = alpha.directory / "data" / "mail.db"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return list(conn.execute(sql, args))
    finally:
        conn.close()


def _kept(alpha: Alpha, task_id: str) -> list[dict[str, Any]]:
    rows = _rows(alpha, "SELECT items FROM task_queues WHERE task_id = ?", task_id + "::parked")
    return json.loads(rows[0]["items"]) if rows else []


def _until(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _task_end_notice(received: dict[str, Any]) -> bool:
    payload = received["envelope"].get("payload") or {}
    return bool(payload.get("subject") == "::task_complete::")


def _alice_asks_beta_then_crash(alpha: Alpha) -> dict[str, Any]:
    """alice's task asks supervisor@swarm-beta (which takes it and answers later); once the
    task is stored as sent there, the server is killed -9 and started again."""
    post_in_background(
        f"{alpha.server.base_url}/message",
        {"body": "what is up", "timeout": 120},
        auth(alpha.keys["alice"]),
    )
    # A task of the test's previous round may send its task-end notice again first: killed
    # before its last step was committed, it ran that step again after the restart.
    deadline = time.monotonic() + 30
    while not (asked := [r for r in alpha.peer.received if not _task_end_notice(r)]):
        assert time.monotonic() < deadline, alpha.peer.received
        time.sleep(0.05)
    (got,) = asked
    question: dict[str, Any] = got["envelope"]
    task_id = question["payload"]["task_id"]
    _until(
        lambda: any(
            "swarm-beta" in str(dict(r))
            for r in _rows(alpha, "SELECT * FROM tasks WHERE task_id = ?", task_id)
        ),
        "the task was never stored as sent to swarm-beta",
    )
    alpha.kill_and_restart()
    return question


def _back(alpha: Alpha, envelope: dict[str, Any], who: str = "beta") -> httpx.Response:
    return httpx.post(
        f"{alpha.server.base_url}/interswarm/back",
        json={"message": envelope},
        headers=auth(alpha.keys[who]),
        timeout=60,
    )


def _answer_of(alpha: Alpha, task_id: str) -> str:
    """alice's task's answer: her request loads her instance, which takes what was kept."""

    def answered() -> str | None:
        r = httpx.get(
            f"{alpha.server.base_url}/task",
            params={"task_id": task_id},
            headers=auth(alpha.keys["alice"]),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        answer = r.json().get("answer")
        return answer if isinstance(answer, str) and answer else None

    return str(_until(answered, f"task {task_id} was never answered"))


def test_an_answer_kept_while_the_owner_is_away_survives_another_crash_and_is_taken_once(
    alpha: Alpha,
) -> None:
    question = _alice_asks_beta_then_crash(alpha)
    task_id = question["payload"]["task_id"]
    answer = answer_envelope(question, "forty-two")

    first = _back(alpha, answer)
    assert first.status_code == 200, first.text  # 404 "no mail instance found" before
    assert first.json()["task_id"] == task_id
    again = _back(alpha, answer)  # the router's retry of a delivery whose 200 it lost
    assert again.status_code == 200, again.text
    kept = _kept(alpha, task_id)  # committed before the 200, and once
    assert [k["envelope"]["message_id"] for k in kept] == [answer["message_id"]]

    alpha.kill_and_restart()  # told "delivered", not handed over yet: the worst moment

    assert _answer_of(alpha, task_id) == "alpha got: forty-two"
    assert alpha.calls_with("<body>forty-two</body>") == 1  # handed to the supervisor once
    _until(lambda: not _kept(alpha, task_id), "the kept answer was not removed once taken")


def test_while_the_owner_is_away_answers_are_checked_and_bounded(alpha: Alpha) -> None:
    question = _alice_asks_beta_then_crash(alpha)
    task_id = question["payload"]["task_id"]

    unknown = answer_envelope(question, "lost")
    unknown["payload"]["task_id"] = str(uuid.uuid4())
    refused = _back(alpha, unknown)
    assert refused.status_code == 404, refused.text
    assert "not known" in refused.json()["detail"]

    keys = alpha.directory / "registries" / "keys.json"
    alpha.keys["gamma"] = create_key(keys, "agent", "swarm-gamma")
    stranger = answer_envelope(question, "not asked")
    stranger["source_swarm"] = "swarm-gamma"
    stranger["payload"]["sender"] = {"address_type": "agent", "address": "x@swarm-gamma"}
    stranger["payload"]["sender_swarm"] = "swarm-gamma"
    refused = _back(alpha, stranger, who="gamma")
    # The task was not sent to swarm-gamma: as the instance answers, it is not known to it.
    assert refused.status_code == 404, refused.text
    assert "not known" in refused.json()["detail"]
    assert _kept(alpha, task_id) == []

    answers = [answer_envelope(question, text) for text in ("one", "two", "three")]
    assert [_back(alpha, a).status_code for a in answers[:2]] == [200, 200]
    full = _back(alpha, answers[2])  # max_parked_answers_per_task = 2
    assert full.status_code == 503, full.text
    assert int(full.headers["Retry-After"]) > 0
    assert [k["envelope"]["payload"]["body"] for k in _kept(alpha, task_id)] == ["one", "two"]
    assert alpha.call_log() and all("not asked" not in c["last"] for c in alpha.call_log())

    # Both handed to the supervisor, once each and in the order they came (one turn may
    # take both: the stub answers with the last).
    assert _answer_of(alpha, task_id) in ("alpha got: one", "alpha got: two")
    _until(lambda: not _kept(alpha, task_id), "the kept answers were not removed once taken")
    r = alpha.get("alice", f"/task?task_id={task_id}")
    assert r.status_code == 200, r.text
    received = [e for e in r.json()["events"] if e.get("event") == "interswarm_message_received"]
    assert len(received) == 2, received  # "one" and "two"; not the refused ones
    handed = json.dumps(r.json()["events"])
    first, second = (handed.find(a["message_id"]) for a in answers[:2])
    assert 0 <= first < second, "not handed over in the order they came"
    assert answers[2]["message_id"] not in handed
