"""Scheduled tasks (``/crons``) over real HTTP against `mail server` processes.

The swarm's supervisor (tests/support/multitask_agents.py) logs every message it gets to a
file both front ends share, so a run started twice shows as two lines. On PostgreSQL (two
servers on one schema; SQLite has one server per file) a cron that fires every second runs
once per scheduled time across both front ends; its runs are ordinary tasks; it
survives a restart; and a server that was down across its scheduled times runs the latest
missed one, once, when it comes back (docs/crons.md, "Missed runs").
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
import zoneinfo
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.multitask_agents import swarms_json
from tests.support.store_backends import DurableStore, scratch_store_fixture

from server_fixtures import SingleServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(180)

durable_store = scratch_store_fixture("mail_crons")

SETTINGS = """
[server.crons]
min_interval = 1
catch_up_window = 60
"""


class FrontEnd:
    """One `mail server` of the deployment, in a folder of its own, on the shared data."""

    def __init__(self, folder: Path, config_text: str, env: dict[str, str]) -> None:
        folder.mkdir(exist_ok=True)
        self.folder, self.env = folder, env
        self.port = free_port()
        self.config = folder / "front.toml"
        self.config.write_text(
            config_text.replace("port = 0\n", f"port = {self.port}\n", 1), encoding="utf-8"
        )
        self.server: SingleServerProcess | None = None

    def start(self) -> FrontEnd:
        self.server = SingleServerProcess(
            self.folder, self.port, args=["--config", str(self.config)], env=self.env
        ).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Deployment:
    def __init__(self, root: Path, store: DurableStore) -> None:
        (root / "swarms.json").write_text(json.dumps(swarms_json("cr")), encoding="utf-8")
        self.root = root
        self.key = create_key(root / "registries" / "keys.json", "user", "alice")
        text = write_config(root, port=0, swarm="cr", extra=SETTINGS).read_text()
        env = {"MAIL_MULTITASK_LOG": str(root / "calls.log"), **store.env}
        self.fronts = [FrontEnd(root / name, text, env) for name in ("a", "b")]

    def call(self, method: str, path: str, front: int = 0, **kw: Any) -> httpx.Response:
        return httpx.request(
            method, f"{self.fronts[front].url}{path}", headers=auth(self.key), timeout=30, **kw
        )

    def calls(self, body: str) -> int:
        path = self.root / "calls.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return lines.count(f"supervisor start {body}")

    def stop(self) -> None:
        for front in self.fronts:
            front.stop()


@pytest.fixture
def deployment(tmp_path: Path, durable_store: DurableStore) -> Iterator[Deployment]:
    made = Deployment(tmp_path, durable_store)
    try:
        yield made
    finally:
        made.stop()


def _until(condition: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _iso(value: float) -> str:
    return dt.datetime.fromtimestamp(value, dt.UTC).isoformat().replace("+00:00", "Z")


def test_a_cron_every_second_runs_once_per_time_across_two_front_ends(
    deployment: Deployment, durable_store: DurableStore
) -> None:
    if durable_store.kind == "sqlite":
        # One server per SQLite file: a second one refuses to start ("in use by another
        # mail process"); with one front end every second still runs once.
        deployment.fronts.pop()
    for front in deployment.fronts:
        front.start()
    made = deployment.call(
        "POST", "/crons", json={"schedule": "* * * * * *", "message": {"body": "tick"}}
    )
    assert made.status_code == 201, made.text
    cron = made.json()
    began = time.time()
    other = len(deployment.fronts) - 1  # the second front end (PostgreSQL)
    # Both front ends know it; each front end's scheduler competes for every second.
    assert deployment.call("GET", f"/crons/{cron['id']}", front=other).json()["id"] == cron["id"]
    _until(lambda: deployment.calls("tick") >= 5, "five runs")
    paused = deployment.call("PATCH", f"/crons/{cron['id']}", front=other, json={"paused": True})
    assert paused.status_code == 200 and paused.json()["paused"] is True, paused.text
    elapsed = time.time() - began
    time.sleep(1.5)  # a run claimed just before the pause starts meanwhile
    seen = deployment.call("GET", f"/crons/{cron['id']}").json()
    runs = deployment.calls("tick")
    # Each scheduled time was claimed by one front end and started once: as many
    # supervisor calls as claimed times, and no more times than seconds went by.
    assert runs == seen["runs"], (runs, seen)
    assert 5 <= runs <= math.ceil(elapsed) + 1, (runs, elapsed)
    # A run is an ordinary task of the owner's, listed by the front end that started it.
    listed = {
        task_id
        for front in range(len(deployment.fronts))
        for task_id in deployment.call("GET", "/tasks", front=front).json()
    }
    assert seen["last_task_id"] in listed, (seen, listed)
    time.sleep(1.2)
    assert deployment.calls("tick") == runs  # paused: nothing more


def test_a_cron_survives_a_restart_and_catches_up_its_latest_missed_time_once(
    deployment: Deployment,
) -> None:
    front = deployment.fronts[0].start()
    zone = zoneinfo.ZoneInfo("Asia/Kolkata")  # +05:30: the schedule is read in its zone
    first = math.ceil(time.time()) + 5
    while (
        dt.datetime.fromtimestamp(first, zone).minute
        != dt.datetime.fromtimestamp(first + 2, zone).minute
    ):
        first += 1
    at = [dt.datetime.fromtimestamp(first + n, zone) for n in range(3)]
    schedule = (
        f"{at[0].second},{at[1].second},{at[2].second} {at[0].minute} {at[0].hour} "
        f"{at[0].day} {at[0].month} *"
    )
    made = deployment.call(
        "POST",
        "/crons",
        json={"schedule": schedule, "timezone": "Asia/Kolkata", "message": {"body": "catch"}},
    )
    assert made.status_code == 201, made.text
    cron = made.json()
    assert cron["next_run"] == _iso(first), cron
    front.stop()
    # Down across all three times.
    _until(lambda: time.time() > first + 3, "the scheduled times to pass", timeout=60)
    assert deployment.calls("catch") == 0
    front.start()
    _until(lambda: deployment.calls("catch") >= 1, "the catch-up run")
    time.sleep(1.5)
    assert deployment.calls("catch") == 1  # only the latest missed time, once
    seen = deployment.call("GET", f"/crons/{cron['id']}").json()
    assert seen["runs"] == 1 and seen["last_run"] == _iso(first + 2), seen
    assert seen["next_run"] > _iso(first + 2), seen  # the same day next year
    task = deployment.call("GET", f"/task?task_id={seen['last_task_id']}")
    assert task.status_code == 200, task.text
