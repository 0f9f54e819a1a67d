"""Acknowledged means stored, for ``POST /task/cancel``: a cancel answered
``{"cancelled": true}`` is still a cancel after a kill -9 right after the answer.

The answer left before the cancel was committed: killed (SIGKILL) 0 to 20 ms after it, a task
that was paused at a breakpoint came back paused after the restart (``waiting_for_breakpoint``,
4 of 4 on SQLite), and one that was running came back running, its agents called again. Real
`mail server` on SQLite (the default) and on PostgreSQL (a schema of this test's own), stub
swarm (``BREAKPOINT`` pauses, ``SLEEP`` keeps the task running).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.kill_restart import KilledServers
from tests.support.store_backends import DurableStore, scratch_store_fixture

pytestmark = pytest.mark.timeout(600)

TRIES = 4
MAX_DELAY = 0.020  # seconds between the answer and the kill

durable_store = scratch_store_fixture("mail_cancel_ack")


class Restarts(KilledServers):
    """One server folder and store, started again after each kill -9."""

    def task(self, task_id: str) -> dict[str, Any]:
        answer = self.get("/task", task_id=task_id)
        assert answer.status_code == 200, answer.text
        record: dict[str, Any] = answer.json()
        return record

    def cancel(self, task_id: str) -> None:
        answer = self.post("/task/cancel", {"task_id": task_id})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"task_id": task_id, "cancelled": True, "state": "completed"}

    def wait_running(self, task_id: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = self.get("/task", task_id=task_id)
            if found.status_code == 200 and found.json().get("is_running"):
                return
            time.sleep(0.02)
        raise AssertionError(f"task {task_id} did not start")


def cancelled(record: dict[str, Any]) -> bool:
    events = [e.get("event") for e in record.get("events") or []]
    return record["state"] == "completed" and "task_cancelled" in events


def cancels_lost(
    servers: Restarts,
    cancel_one: Callable[[], tuple[str, Callable[[], None]]],
    lost_if: Callable[[dict[str, Any]], bool],
) -> list[tuple[float, str]]:
    """TRIES rounds of: ``cancel_one`` (a task cancelled; its id and what to do once the
    server is back), kill -9 0 to MAX_DELAY s after the answer, restart; the rounds whose
    task's record after the restart is ``lost_if`` (delay ms, state)."""
    lost: list[tuple[float, str]] = []
    with servers:
        for i in range(TRIES):
            task_id, after_restart = cancel_one()
            delay = MAX_DELAY * i / (TRIES - 1)
            servers.kill_and_restart(delay)
            after_restart()
            record = servers.task(task_id)
            if lost_if(record):
                lost.append((round(delay * 1000), record["state"]))
    return lost


def test_a_cancelled_paused_task_stays_cancelled_after_kill(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    servers = Restarts(tmp_path, durable_store.env)

    def cancel_paused() -> tuple[str, Callable[[], None]]:
        paused = servers.post("/message", {"body": "BREAKPOINT", "subject": "s"})
        assert paused.status_code == 200, paused.text
        task_id: str = paused.json()["task_id"]
        assert servers.task(task_id)["state"] == "waiting_for_breakpoint"
        servers.cancel(task_id)
        return task_id, lambda: None

    lost = cancels_lost(servers, cancel_paused, lambda record: not cancelled(record))
    assert not lost, (
        f"{len(lost)} of {TRIES} cancels were gone after kill -9 "
        f"({durable_store.kind}; delay ms, state after the restart): {lost}"
    )


def test_a_cancelled_running_task_does_not_run_again_after_kill(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    servers = Restarts(tmp_path, durable_store.env)

    def cancel_running() -> tuple[str, Callable[[], None]]:
        task_id = str(uuid.uuid4())
        body = {"body": "SLEEP 30 hi", "task_id": task_id}
        waiting = threading.Thread(  # the caller waiting for the task's answer
            target=_ignore_errors, args=(servers.post, "/message", body)
        )
        waiting.start()
        servers.wait_running(task_id)
        servers.cancel(task_id)
        return task_id, lambda: waiting.join(60)

    lost = cancels_lost(
        servers, cancel_running, lambda record: not cancelled(record) or record["is_running"]
    )
    assert not lost, (
        f"{len(lost)} of {TRIES} cancelled running tasks were not cancelled after kill -9 "
        f"({durable_store.kind}; delay ms, state after the restart): {lost}"
    )


def _ignore_errors(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except httpx.HTTPError:
        pass  # the server was killed under it
