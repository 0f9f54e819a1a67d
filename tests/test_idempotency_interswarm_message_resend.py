"""A keyed ``POST /interswarm/message`` sent straight to a peer's agent, cut by a kill -9 after
the peer took the message and before this server stored anything of the task: the retry must
not hand the peer's agent the user's message a second time.

The key is committed with the task id and ``after: 0`` (`message_keys.take_task_key`), then
the message goes to the runtime and the bridge posts it to the peer at once; the task's own
writes are behind. A kill -9 before they commit leaves the key and no task, so after the
restart and the takeover the route runs again (`message_replay.key_task`: no events past
``after``: "the task never got the message"). It built a new MAIL message with a new id, so
the peer could not tell it from a new message (its dedupe is by ``message_id``) and its agent
took a second turn. The key now keeps the message id and the retry sends the message under
it again: the peer drops it as a re-delivery.

Deterministic on PostgreSQL: a trigger holds this server's ``task_events`` inserts (the task's
first write batch) until the kill, as `tests.support.held_outcome` holds a key's outcome.
Found by an attack round on the interswarm retries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.held_outcome import execute, rows
from tests.support.restarted_alpha import Alpha, alpha_beside_peer, background_post

from server_fixtures import auth

pytestmark = pytest.mark.timeout(300)

HOLD_EVENTS = """
CREATE FUNCTION hold_events() RETURNS trigger AS $$
BEGIN PERFORM pg_sleep(120); RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE TRIGGER hold_events BEFORE INSERT ON task_events
    FOR EACH ROW EXECUTE FUNCTION hold_events();
"""
HELD = (
    "FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
    "AND wait_event = 'PgSleep'"
)


@pytest.fixture
def alpha(tmp_path: Path) -> Iterator[Alpha]:
    with alpha_beside_peer(tmp_path, "mail_idem_isw_resend") as made:
        yield made


def _kill_with_task_writes_held(alpha: Alpha) -> None:
    assert alpha.server.proc is not None
    alpha.server.proc.kill()
    alpha.server.proc.wait(10)
    rows(alpha.url, f"SELECT pg_terminate_backend(pid) AS ended {HELD}")
    execute(alpha.url, "DROP TRIGGER hold_events ON task_events")


def test_a_direct_interswarm_message_cut_before_its_task_was_stored_reaches_the_peer_once(
    alpha: Alpha,
) -> None:
    execute(alpha.url, HOLD_EVENTS)
    body = {"targets": ["supervisor@swarm-beta"], "body": "do it once", "timeout": 120}
    headers = {**auth(alpha.keys["alice"]), "Idempotency-Key": '"direct-once-1"'}
    url = f"{alpha.server.base_url}/interswarm/message"
    with background_post(url, body, headers) as cut:
        (first,) = alpha.peer.wait_for(1)  # the peer took the message (200)
        deadline = time.monotonic() + 30
        while not rows(alpha.url, f"SELECT count(*) AS n {HELD}")[0]["n"]:
            assert time.monotonic() < deadline, alpha.server.logs()[-3000:]
            time.sleep(0.05)
        _kill_with_task_writes_held(alpha)
    assert cut and isinstance(cut[0], httpx.HTTPError), cut  # the caller got no answer
    task_id = first["envelope"]["payload"]["task_id"]
    (key,) = rows(alpha.url, "SELECT subject FROM idempotency_keys")
    assert key["subject"] == task_id  # the key was committed with the task id ...
    assert rows(alpha.url, "SELECT task_id FROM tasks") == []  # ... the task was not
    sent = time.monotonic()
    alpha.server = alpha.start()
    time.sleep(max(0.0, sent + 3.5 - time.monotonic()))  # past idempotency_takeover_after

    outcome = _repeat_until_sent_again_or_answered(alpha, url, body, headers)

    forwards = [r["envelope"] for r in alpha.peer.received if r["path"] == "/interswarm/forward"]
    ids = {f["message_id"] for f in forwards}
    # Before: two forwards of the same user message, with two message ids (the peer's
    # agent answered both: two turns, two model calls). Now the same id twice at most.
    assert len(ids) == 1, (outcome, [(f["message_id"], f["payload"]["body"]) for f in forwards])


def _repeat_until_sent_again_or_answered(
    alpha: Alpha, url: str, body: dict[str, Any], headers: dict[str, str]
) -> list[Any]:
    """The client's retries with the same key, as told (409 + Retry-After: again), until an
    answer other than 409 comes, the peer got the message again, or 10 attempts were made
    (a repeat that runs the route again waits for the peer's answer, which never comes)."""
    outcome: list[Any] = []
    url = f"{alpha.server.base_url}/interswarm/message"

    def repeat() -> None:
        for _ in range(10):
            try:
                answer = httpx.post(url, json=body, headers=headers, timeout=120)
            except httpx.HTTPError as exc:
                outcome.append(exc)
                return
            outcome.append((answer.status_code, answer.text[:300]))
            if answer.status_code != 409 or "retry-after" not in answer.headers:
                return
            time.sleep(float(answer.headers["retry-after"]))

    thread = threading.Thread(target=repeat, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while thread.is_alive() and len(alpha.peer.received) < 2:
        assert time.monotonic() < deadline, outcome
        time.sleep(0.05)
    return outcome
