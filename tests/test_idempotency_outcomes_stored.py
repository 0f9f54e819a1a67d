"""Stored idempotency outcomes are the caller's stored bytes, and go with their task: a real
`mail server` on the stub swarm, SQLite and PostgreSQL.

The outcome a keyed ``POST /message`` with ``show_events`` keeps (its answer with the events,
about twice the size of the message) counted toward no quota, and outlived the task when
retention or `mail db-prune` removed it (a repeat then replayed the removed task's events).
Now it counts as the task's bytes (`[server.store] max_stored_bytes_per_caller`), and when
the task is removed only the mark that the key was answered stays: a repeat is told the task
was removed (404), and nothing runs twice.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, ServerProcess, auth, keyed_stub_server, server_env
from support.store_backends import DurableStore, scratch_store_fixture

pytestmark = pytest.mark.timeout(300)

durable_store = scratch_store_fixture("mail_key_outcomes")

MIB = 1024 * 1024
QUOTA = 4 * MIB
BODY = 400_000
# (Lines of [server.settings], which the test config opens last.)
LIMITS = f"""
max_message_body = {8 * MIB}
max_request_body = {16 * MIB}
"""


def _stored(server: ServerProcess, who: str) -> float:
    """What the caller stores, in MiB, as the 429 of a message too large to fit says."""
    refused = httpx.post(
        f"{server.base_url}/message",
        json={"body": "p" * QUOTA},
        headers=auth(server.keys[who]),
        timeout=60,
    )
    assert refused.status_code == 429, refused.text
    found = re.search(r"you store ([\d.]+) (MiB|KiB)", refused.json()["detail"])
    assert found, refused.text
    return float(found.group(1)) / (1024 if found.group(2) == "KiB" else 1)


def test_outcomes_count_in_the_callers_stored_bytes(durable_store: DurableStore) -> None:
    extra = f"{LIMITS}\n[server.store]\nmax_stored_bytes_per_caller = {QUOTA}\n"
    with keyed_stub_server(
        durable_store.directory, ROOT_ALICE_BOB, extra=extra, env=durable_store.env
    ) as server:
        message = {"body": "x" * BODY, "show_events": True}
        keyed = httpx.post(
            f"{server.base_url}/message",
            json=message,
            headers={**auth(server.keys["alice"]), "Idempotency-Key": '"outcome-1"'},
            timeout=60,
        )
        plain = httpx.post(
            f"{server.base_url}/message", json=message, headers=auth(server.keys["bob"]), timeout=60
        )
        assert keyed.status_code == plain.status_code == 200, keyed.text + plain.text
        outcome = len(keyed.content) / MIB
        assert outcome > 0.5, outcome  # (the answer carries the events: the body twice)
        time.sleep(1.5)  # both tasks are measured once they leave memory
        alice, bob = _stored(server, "alice"), _stored(server, "bob")
        assert alice - bob >= 0.8 * outcome, (alice, bob, outcome)


def _repeat(server: ServerProcess, key: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/message",
        json={"body": "x" * BODY, "show_events": True},
        headers={**auth(server.keys["alice"]), "Idempotency-Key": f'"{key}"'},
        timeout=60,
    )


def _outcome_bytes(store: DurableStore, key: str) -> int:
    rows = store.fetch(
        "SELECT COALESCE(length(body), 0) AS n FROM idempotency_keys WHERE idem_key = $1", key
    )
    assert len(rows) == 1, rows
    return int(rows[0]["n"])


def _outcome_stored(store: DurableStore, key: str) -> None:
    """Until the key's outcome is written (a moment after its answer)."""
    deadline = time.monotonic() + 30
    while _outcome_bytes(store, key) <= BODY:
        assert time.monotonic() < deadline, "the outcome was never stored"
        time.sleep(0.1)


def _prune(store: DurableStore) -> None:
    where = (
        ["--database-url", store.database_url or ""]
        if store.kind == "postgres"
        else ["--sqlite", str(store.sqlite_path)]
    )
    done = subprocess.run(
        [sys.executable, "-m", "mail.cli", "db-prune", "--older-than", "0", *where],
        cwd=store.directory,
        env=server_env(store.env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Removed 1 task(s)" in done.stdout, done.stdout + done.stderr


def _removed(answer: httpx.Response) -> None:
    assert answer.status_code == 404, answer.text
    assert "was removed" in answer.json()["detail"], answer.text


def test_outcomes_go_with_their_task(durable_store: DurableStore) -> None:
    """Retention, then `mail db-prune`: the outcome's bytes are gone with the task, and a
    repeat of the key is told so instead of replaying the removed task's events."""
    retention = "[server.store]\nfinished_task_ttl = 1\nprune_interval = 0.3\n"
    directory = durable_store.directory
    with keyed_stub_server(
        directory, ROOT_ALICE_BOB, extra=LIMITS + retention, env=durable_store.env
    ) as server:
        first = _repeat(server, "by-retention")
        assert first.status_code == 200, first.text
        task_id = first.json()["task_id"]
        _outcome_stored(durable_store, "by-retention")
        deadline = time.monotonic() + 60
        alice = auth(server.keys["alice"])
        while time.monotonic() < deadline:
            gone = httpx.get(
                f"{server.base_url}/task", params={"task_id": task_id}, headers=alice, timeout=30
            )
            if gone.status_code == 404:
                break
            time.sleep(0.2)
        assert gone.status_code == 404, gone.text
        assert _outcome_bytes(durable_store, "by-retention") == 0
        _removed(_repeat(server, "by-retention"))

    keep = "[server.store]\nfinished_task_ttl = 0\n"
    with keyed_stub_server(
        directory, ROOT_ALICE_BOB, extra=LIMITS + keep, env=durable_store.env
    ) as server:
        assert _repeat(server, "by-db-prune").status_code == 200
        _outcome_stored(durable_store, "by-db-prune")
    _prune(durable_store)
    assert _outcome_bytes(durable_store, "by-db-prune") == 0
    with keyed_stub_server(
        directory, ROOT_ALICE_BOB, extra=LIMITS + keep, env=durable_store.env
    ) as server:
        _removed(_repeat(server, "by-db-prune"))
