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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.store_backends import DurableStore, scratch_durable_store

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(600)

TRIES = 4
MAX_DELAY = 0.020  # seconds between the answer and the kill


@pytest.fixture(params=["sqlite", "postgres"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableStore]:
    with scratch_durable_store(request.param, tmp_path, "mail_cancel_ack") as store:
        yield store


class Restarts:
    """One server directory and store, started again after each kill -9."""

    def __init__(self, directory: Path, store: DurableStore) -> None:
        write_stub_swarms(directory)
        self.directory = directory
        self.store = store
        self.headers = auth(create_key(directory / "registries" / "keys.json", "user", "alice"))
        self.server = self.start()

    def start(self) -> ServerProcess:
        port = free_port()
        config = write_config(self.directory, port=port)
        server = ServerProcess(
            self.directory, port, args=["--config", str(config)], env=self.store.env
        )
        return server.start()

    def kill_after(self, delay: float) -> None:
        assert self.server.proc is not None
        time.sleep(delay)  # the delay under test, not a wait for something
        self.server.proc.kill()  # kill -9: no shutdown hook runs
        self.server.proc.wait(10)
        self.server = self.start()

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.server.base_url}{path}", json=body, headers=self.headers, timeout=60
        )

    def task(self, task_id: str) -> dict[str, Any]:
        answer = httpx.get(
            f"{self.server.base_url}/task",
            params={"task_id": task_id},
            headers=self.headers,
            timeout=60,
        )
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
            found = httpx.get(
                f"{self.server.base_url}/task",
                params={"task_id": task_id},
                headers=self.headers,
                timeout=60,
            )
            if found.status_code == 200 and found.json().get("is_running"):
                return
            time.sleep(0.02)
        raise AssertionError(f"task {task_id} did not start")


def cancelled(record: dict[str, Any]) -> bool:
    events = [e.get("event") for e in record.get("events") or []]
    return record["state"] == "completed" and "task_cancelled" in events


def test_a_cancelled_paused_task_stays_cancelled_after_kill(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    servers = Restarts(tmp_path, durable_store)
    lost: list[tuple[float, str]] = []
    try:
        for i in range(TRIES):
            paused = servers.post("/message", {"body": "BREAKPOINT", "subject": "s"})
            assert paused.status_code == 200, paused.text
            task_id = paused.json()["task_id"]
            assert servers.task(task_id)["state"] == "waiting_for_breakpoint"
            servers.cancel(task_id)
            delay = MAX_DELAY * i / (TRIES - 1)
            servers.kill_after(delay)
            record = servers.task(task_id)
            if not cancelled(record):
                lost.append((round(delay * 1000), record["state"]))
    finally:
        servers.server.stop()
    assert not lost, (
        f"{len(lost)} of {TRIES} cancels were gone after kill -9 "
        f"({durable_store.kind}; delay ms, state after the restart): {lost}"
    )


def test_a_cancelled_running_task_does_not_run_again_after_kill(
    durable_store: DurableStore, tmp_path: Path
) -> None:
    servers = Restarts(tmp_path, durable_store)
    lost: list[tuple[float, str]] = []
    try:
        for i in range(TRIES):
            task_id = str(uuid.uuid4())
            body = {"body": "SLEEP 30 hi", "task_id": task_id}
            waiting = threading.Thread(  # the caller waiting for the task's answer
                target=_ignore_errors, args=(servers.post, "/message", body)
            )
            waiting.start()
            servers.wait_running(task_id)
            servers.cancel(task_id)
            delay = MAX_DELAY * i / (TRIES - 1)
            servers.kill_after(delay)
            waiting.join(60)
            record = servers.task(task_id)
            if not cancelled(record) or record["is_running"]:
                lost.append((round(delay * 1000), record["state"]))
    finally:
        servers.server.stop()
    assert not lost, (
        f"{len(lost)} of {TRIES} cancelled running tasks were not cancelled after kill -9 "
        f"({durable_store.kind}; delay ms, state after the restart): {lost}"
    )


def _ignore_errors(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except httpx.HTTPError:
        pass  # the server was killed under it
