"""A peer's ``POST /interswarm/back`` (its answer to a task of this server's user, waiting on
that peer) after a kill -9 of the server, before the task's owner made any request.

After a restart a caller's instance is loaded again only at that caller's next request (its
API key becomes its agents' ``user_token``, which a peer's ``/back`` does not carry). Such a
``/back`` was refused 404 ``no mail instance found for contributor``, which a peer's router
does not resend: the answer was lost. It is now kept in the store for the task
(`mail.server.parked_answers`) and handed to the owner's instance when it is loaded:

- `test_a_peer_answer_after_a_restart_reaches_a_task_whose_owner_has_not_come_back`: the
  answer of a peer whose agent already did the work reaches the task, once;
- `test_a_cut_back_retried_after_the_takeover_is_not_refused`: the router's retry of a
  ``/back`` cut by a kill -9 after its message was stored is answered 200, and the message
  is handed over once.

Both failed (404) before. Found by an attack round on the interswarm retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.held_outcome import cut_by_kill_9, retry
from tests.support.pg_schema import fetch_rows
from tests.support.restarted_alpha import (
    Alpha,
    alpha_beside_peer,
    answer_envelope,
    post_in_background,
)

from server_fixtures import auth

pytestmark = [pytest.mark.timeout(300)]

ANSWER_TEXT = "forty-two"


@pytest.fixture
def alpha(tmp_path: Path) -> Iterator[Alpha]:
    with alpha_beside_peer(tmp_path, "mail_idem_back_restart") as made:
        yield made


def _alice_asks_beta(alpha: Alpha) -> tuple[dict[str, Any], list[Any]]:
    """alice's message (left running: a kill -9 cuts it); alpha's supervisor asks
    supervisor@swarm-beta, which takes the question (200) and answers later."""
    url = f"{alpha.server.base_url}/message"
    body = {"body": "what is up", "timeout": 120}
    answers, _ = post_in_background(url, body, auth(alpha.keys["alice"]))
    (got,) = alpha.peer.wait_for(1)
    assert got["path"] == "/interswarm/forward", got
    return got["envelope"], answers


def _wait_stored_as_sent_to_beta(alpha: Alpha, task_id: str) -> None:
    """Until the task's record in the database names swarm-beta as a swarm it was sent to (a
    task not stored yet is unknown after the kill: its user was never answered, and a peer's
    answer to it is refused, rightly)."""
    deadline = time.monotonic() + 30
    while True:
        rows = asyncio.run(fetch_rows(alpha.url, "SELECT * FROM tasks WHERE task_id = $1", task_id))
        if rows and "swarm-beta" in str(dict(rows[0])):
            return
        assert time.monotonic() < deadline, rows
        time.sleep(0.05)


def _completed_in_store(alpha: Alpha, task_id: str) -> bool:
    rows = asyncio.run(
        fetch_rows(alpha.url, "SELECT completed FROM tasks WHERE task_id = $1", task_id)
    )
    return bool(rows) and bool(rows[0]["completed"])


def _alice_task(alpha: Alpha, task_id: str) -> dict[str, Any]:
    r = alpha.get("alice", "/tasks")
    assert r.status_code == 200, r.text
    tasks = r.json()
    return tasks[task_id] if isinstance(tasks, dict) else {t["task_id"]: t for t in tasks}[task_id]


def _answered(alpha: Alpha, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        task = _alice_task(alpha, task_id)
        if task.get("answer"):
            return task
        assert time.monotonic() < deadline, (task, alpha.server.logs()[-3000:])
        time.sleep(0.2)


def test_a_peer_answer_after_a_restart_reaches_a_task_whose_owner_has_not_come_back(
    alpha: Alpha,
) -> None:
    question, cut = _alice_asks_beta(alpha)
    task_id = question["payload"]["task_id"]
    _wait_stored_as_sent_to_beta(alpha, task_id)
    alpha.kill_and_restart()  # while the task waits for beta's answer
    assert cut and isinstance(cut[0], httpx.HTTPError), cut

    # beta's router delivers the answer, as it does every answer (with a key of its own).
    body = {"message": answer_envelope(question, ANSWER_TEXT)}
    headers = {**auth(alpha.keys["beta"]), "Idempotency-Key": '"beta-answer-1"'}
    answer = httpx.post(
        f"{alpha.server.base_url}/interswarm/back", json=body, headers=headers, timeout=60
    )

    # 404 "no mail instance found for contributor: user:alice@swarm-alpha" before: the
    # answer is refused for good (a router does not resend a 404).
    assert answer.status_code == 200, answer.text
    assert _answered(alpha, task_id)["answer"] == f"alpha got: {ANSWER_TEXT}"
    assert alpha.calls_with(f"<body>{ANSWER_TEXT}</body>") == 1


def test_a_cut_back_retried_after_the_takeover_is_not_refused(alpha: Alpha) -> None:
    question, _ = _alice_asks_beta(alpha)
    task_id = question["payload"]["task_id"]
    body = {"message": answer_envelope(question, ANSWER_TEXT)}
    headers = {**auth(alpha.keys["beta"]), "Idempotency-Key": '"beta-answer-2"'}
    # The answer is taken (stored with its task, handed to the supervisor), then the
    # server dies before the key's outcome is stored: the router got no answer. Killed once
    # the supervisor's turn on the answer is committed too (the task completed): killed
    # before, the restarted task would rightly run that turn again (nobody was told of it),
    # a second call that is the crash's, not the retry's; this counts the retry's alone.
    cut_by_kill_9(
        alpha.server,
        alpha.url,
        "POST",
        "/interswarm/back",
        body,
        headers,
        settled=lambda: _completed_in_store(alpha, task_id),
    )
    alpha.server = alpha.start()

    answer = retry(alpha.server, "POST", "/interswarm/back", body, headers)  # after takeover

    # 404 before: the router reports a failed delivery of an answer that was delivered.
    assert answer.status_code == 200, answer.text
    assert answer.json()["task_id"] == task_id
    assert _answered(alpha, task_id)["answer"] == f"alpha got: {ANSWER_TEXT}"
    assert alpha.calls_with(f"<body>{ANSWER_TEXT}</body>") == 1  # handed over once
