"""Scheduled tasks (``/crons``) over real HTTP against `mail server` processes.

The swarm's supervisor (tests/support/multitask_agents.py) logs every message it gets to a
file both front ends share, so a run started twice shows as two lines. On PostgreSQL (two
servers on one schema; SQLite has one server per file) a cron that fires every second runs
once per scheduled time across both front ends; its runs are ordinary tasks; it
survives a restart; and a server that was down across its scheduled times runs the latest
missed one, once, when it comes back (docs/crons.md, "Missed runs").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import math
import time
import zoneinfo
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook
from tests.support.multitask_agents import swarms_json
from tests.support.store_backends import DurableStore, scratch_store_fixture
from tests.support.webhook_receiver import ReceiverProcess

from mail.client import MAILClient
from server_fixtures import (
    SingleServerProcess,
    auth,
    create_key,
    free_port,
    run_cli,
    write_config,
)

pytestmark = pytest.mark.timeout(180)

durable_store = scratch_store_fixture("mail_crons")

CRONS = 4

SETTINGS = """
[server.crons]
min_interval = 1
catch_up_window = 60
rescan_interval = 0.5
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
    def __init__(
        self, root: Path, env: dict[str, str], settings: str = SETTINGS, fronts: int = 2
    ) -> None:
        (root / "swarms.json").write_text(json.dumps(swarms_json("cr")), encoding="utf-8")
        self.root = root
        self.key = create_key(root / "registries" / "keys.json", "user", "alice")
        self.bob = create_key(root / "registries" / "keys.json", "user", "bob")
        text = write_config(root, port=0, swarm="cr", extra=settings).read_text()
        env = {"MAIL_MULTITASK_LOG": str(root / "calls.log"), **env}
        self.fronts = [FrontEnd(root / name, text, env) for name in ("a", "b")[:fronts]]

    def call(
        self, method: str, path: str, front: int = 0, key: str | None = None, **kw: Any
    ) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.fronts[front].url}{path}",
            headers=auth(key or self.key),
            timeout=30,
            **kw,
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
    made = Deployment(tmp_path, durable_store.env)
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
    other = len(deployment.fronts) - 1  # the second front end (PostgreSQL)
    began = time.time()  # (the first cron runs while the others are made)
    # Several crons due at the same instants: while one front end claims and starts the
    # runs of some, the other reads them all (without a compare-and-set both would start
    # a good share of them).
    crons = []
    for n in range(CRONS):
        made = deployment.call(
            "POST",
            "/crons",
            front=n % len(deployment.fronts),
            json={"schedule": "* * * * * *", "message": {"body": f"tick{n}"}},
        )
        assert made.status_code == 201, made.text
        crons.append(made.json()["id"])
    # Both front ends know them; each front end's scheduler competes for every second.
    assert deployment.call("GET", f"/crons/{crons[0]}", front=other).status_code == 200
    _until(lambda: deployment.calls(f"tick{CRONS - 1}") >= 5, "five runs of each")
    for cron_id in crons:
        paused = deployment.call("PATCH", f"/crons/{cron_id}", front=other, json={"paused": True})
        assert paused.status_code == 200 and paused.json()["paused"] is True, paused.text
    elapsed = time.time() - began

    def started(n: int) -> bool:  # a run claimed just before the pause starts meanwhile
        runs = deployment.call("GET", f"/crons/{crons[n]}").json()["runs"]
        return bool(deployment.calls(f"tick{n}") == runs)

    for n in range(CRONS):
        # Each scheduled time was claimed by one front end and started once: as many
        # supervisor calls as claimed times.
        try:
            _until(functools.partial(started, n), f"cron {n}: a call per claimed time")
        except AssertionError:
            seen = deployment.call("GET", f"/crons/{crons[n]}").json()
            raise AssertionError((n, deployment.calls(f"tick{n}"), seen)) from None
    listed = {
        task_id
        for front in range(len(deployment.fronts))
        for task_id in deployment.call("GET", "/tasks", front=front).json()
    }
    for n, cron_id in enumerate(crons):
        seen = deployment.call("GET", f"/crons/{cron_id}").json()
        runs = deployment.calls(f"tick{n}")
        assert runs == seen["runs"], (n, runs, seen)  # and no more times than seconds passed
        assert 5 <= runs <= math.ceil(elapsed) + 1, (runs, elapsed)
        # A run is an ordinary task of the owner's, listed by the front end that started it.
        assert seen["last_task_id"] in listed, (seen, listed)
    time.sleep(1.2)
    assert [deployment.calls(f"tick{n}") for n in range(CRONS)] == [
        deployment.call("GET", f"/crons/{c}").json()["runs"] for c in crons
    ]  # paused: nothing more


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


STRICT = """
[server.crons]
min_interval = 2
max_crons_per_caller = 2
catch_up_window = 1
max_message_bytes = 1024

[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.2]
poll_interval = 0.2
"""


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, {}, settings=STRICT, fronts=1)  # SQLite, one server
    made.fronts[0].start()
    try:
        yield made
    finally:
        made.stop()


def _refused(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert all(w in detail for w in words), detail


def test_crons_are_checked_bounded_and_owned_and_their_runs_reach_the_webhook(
    strict: Deployment,
) -> None:
    post = lambda body, key=None: strict.call("POST", "/crons", json=body, key=key)  # noqa: E731
    tick = {"body": "hook"}
    _refused(post({"schedule": "* * * * * *", "message": tick}), 400, "min_interval", "1 s")
    _refused(post({"schedule": "every day", "message": tick}), 400, "cron expression")
    # Five fields, one out of range: that field is named, not the number of fields.
    _refused(
        post({"schedule": "61 * * * *", "message": tick}),
        400,
        "in '61 * * * *', the minute field (field 1) '61' is not valid: it takes 0-59",
    )
    _refused(post({"schedule": "0 9 * 13 *", "message": tick}), 400, "month field (field 4)")
    _refused(post({"schedule": "0 9 * * *", "timezone": "Mars/Base", "message": tick}), 400, "Mars")
    _refused(
        post({"schedule": "0 9 * * *", "timezone": "localtime", "message": tick}), 400, "localtime"
    )
    _refused(
        post({"schedule": "0 9 * * *", "message": {"body": "x", "task_id": "t"}}), 400, "task_id"
    )
    _refused(
        post({"schedule": "0 9 * * *", "message": {"body": "x" * 2000}}), 413, "max_message_bytes"
    )
    _refused(post({"schedule": "0 9 * * *", "message": {}}), 400, "no message")
    _refused(post({"schedule": "0 9 * * *", "message": tick, "cron": 1}), 400, "unknown")

    receiver = ReceiverProcess(free_port(), strict.root).start()
    try:
        made = post(
            {
                "schedule": "*/2 * * * * *",
                "message": tick,
                "webhook": {"url": receiver.url("/cron"), "events": ["task.completed"]},
                "paused": True,  # until the receiver knows the secret: no run before it
            }
        )
        assert made.status_code == 201, made.text
        cron = made.json()
        secret = cron["webhook"]["secret"]  # made by the server, shown this once
        assert secret.startswith("whsec_")
        receiver.secrets("/cron", secret)
        resumed = strict.call("PATCH", f"/crons/{cron['id']}", json={"paused": False})
        assert resumed.status_code == 200 and resumed.json()["paused"] is False, resumed.text
        seen = strict.call("GET", f"/crons/{cron['id']}").json()
        assert "secret" not in seen["webhook"], seen
        other = post({"schedule": "0 9 * * 1-5", "message": tick})
        assert other.status_code == 201, other.text
        _refused(post({"schedule": "0 10 * * *", "message": tick}), 429, "max_crons_per_caller")

        # Bob neither sees nor touches Alice's crons, and has his own bound.
        assert strict.call("GET", "/crons", key=strict.bob).json() == {"crons": []}
        for method in ("GET", "DELETE"):
            _refused(strict.call(method, f"/crons/{cron['id']}", key=strict.bob), 404, cron["id"])
        assert post({"schedule": "0 9 * * *", "message": tick}, key=strict.bob).status_code == 201

        # Its run is a task of Alice's whose completion reaches the cron's webhook, signed.
        def delivered() -> dict[str, Any] | None:
            for entry in receiver.received("/cron"):
                assert entry["verified"] is True, entry
                return ReceiverProcess.payload(entry)
            return None

        payload = _until(delivered, "the run's task.completed delivery")
        assert payload["type"] == "task.completed", payload
        run = strict.call("GET", f"/task?task_id={payload['data']['task_id']}")
        assert run.status_code == 200, run.text
    finally:
        receiver.stop()

    paused = strict.call("PATCH", f"/crons/{cron['id']}", json={"paused": True}).json()
    assert paused["paused"] is True and paused["next_run"] is None, paused
    resumed = strict.call("PATCH", f"/crons/{cron['id']}", json={"paused": False}).json()
    assert resumed["next_run"] is not None, resumed
    assert strict.call("DELETE", f"/crons/{cron['id']}").status_code == 204
    assert strict.call("GET", f"/crons/{cron['id']}").status_code == 404
    assert [c["id"] for c in strict.call("GET", "/crons").json()["crons"]] == [other.json()["id"]]


def test_a_missed_time_older_than_the_catch_up_window_is_skipped(strict: Deployment) -> None:
    first = math.ceil(time.time()) + 4
    at = dt.datetime.fromtimestamp(first, dt.UTC)
    schedule = f"{at.second} {at.minute} {at.hour} {at.day} {at.month} *"
    made = strict.call("POST", "/crons", json={"schedule": schedule, "message": {"body": "late"}})
    assert made.status_code == 201, made.text
    cron = made.json()
    strict.fronts[0].stop()
    _until(lambda: time.time() > first + 2.5, "the time to pass by more than the window")
    strict.fronts[0].start()
    # The scheduler looked at it (its next run moved on, a year ahead) and ran nothing.
    seen = _until(
        lambda: (
            (c := strict.call("GET", f"/crons/{cron['id']}").json())["next_run"] != _iso(first)
            and c
        ),
        "the missed time to be passed over",
    )
    assert seen["runs"] == 0 and seen["last_run"] is None, seen
    assert seen["next_run"] > _iso(first + 86400), seen
    assert strict.calls("late") == 0


def test_runs_stop_when_the_scheduling_key_is_revoked_and_the_client_manages_crons(
    strict: Deployment,
) -> None:
    second = create_key(strict.root / "registries" / "keys.json", "user", "alice")

    async def manage() -> dict[str, Any]:
        async with MAILClient(strict.fronts[0].url, api_key=strict.key) as client:
            made = await client.create_cron(
                "*/2 * * * * *", {"body": "keyed"}, timezone="Europe/Paris", description="k"
            )
            assert [c["id"] for c in await client.list_crons()] == [made["id"]]
            assert (await client.get_cron(made["id"]))["description"] == "k"
            changed = await client.update_cron(made["id"], description="kept")
            assert changed["description"] == "kept" and changed["timezone"] == "Europe/Paris"
            return made

    cron = asyncio.run(manage())
    _until(lambda: strict.calls("keyed") >= 1, "a run")
    code, _out, err = run_cli(
        "keys", "--keys-file", str(strict.root / "registries" / "keys.json"), "revoke", strict.key
    )
    assert code == 0, err
    # The key that scheduled it is gone: its runs are refused, saying why.
    refused = _until(
        lambda: (
            (c := strict.call("GET", f"/crons/{cron['id']}", key=second).json())["last_error"] and c
        ),
        "a refused run",
    )
    assert "no longer works" in refused["last_error"], refused
    ran = strict.calls("keyed")
    # Changed with a key that works, it runs again.
    assert strict.call("PATCH", f"/crons/{cron['id']}", key=second, json={}).status_code == 200
    _until(lambda: strict.calls("keyed") > ran, "a run with the new key")

    async def remove() -> list[dict[str, Any]]:
        async with MAILClient(strict.fronts[0].url, api_key=second) as client:
            await client.delete_cron(cron["id"])
            return await client.list_crons()

    assert asyncio.run(remove()) == []


def test_a_refused_run_is_not_counted_and_names_no_task(strict: Deployment) -> None:
    # The entrypoint is checked at each run: this one is refused every time, and says why.
    made = strict.call(
        "POST",
        "/crons",
        json={"schedule": "*/2 * * * * *", "message": {"body": "x", "entrypoint": "nobody"}},
    )
    assert made.status_code == 201, made.text
    path = f"/crons/{made.json()['id']}"
    refused = _until(
        lambda: (c := strict.call("GET", path).json())["last_error"] and c, "a refused run"
    )
    assert "nobody" in refused["last_error"], refused
    # Nothing started: no run counted, no task id to follow (it would be a 404).
    assert refused["runs"] == 0 and refused["last_task_id"] is None, refused
    assert refused["last_run"] is not None, refused


def test_a_daily_time_runs_once_on_the_night_clocks_go_back() -> None:
    # The server's own schedule arithmetic (no server can wait for October): Berlin's
    # clocks go back at 03:00 on 2026-10-25, so 02:00-02:59 happens twice that night.
    from mail.server.crons import latest_time, next_time

    berlin = zoneinfo.ZoneInfo("Europe/Berlin")

    def runs(schedule: str, count: int) -> list[str]:
        at = dt.datetime(2026, 10, 24, 12, tzinfo=berlin).timestamp()
        out = []
        for _ in range(count):
            at = next_time(schedule, berlin, at)
            out.append(dt.datetime.fromtimestamp(at, dt.UTC).strftime("%d %H:%M"))
        return out

    assert runs("30 2 * * *", 2) == ["25 00:30", "26 01:30"]  # not 25 01:30 as well
    hourly = runs("0 */1 * * *", 20)  # every hour runs through both passes
    assert hourly == [f"{h // 24 + 24} {h % 24:02d}:00" for h in range(11, 31)], hourly
    back = dt.datetime(2026, 10, 25, 2, 45, fold=1, tzinfo=berlin).timestamp()
    assert latest_time("30 2 * * *", berlin, back) == next_time("30 2 * * *", berlin, back - 86400)


def test_a_cron_runs_once_per_time_on_the_memory_store(tmp_path: Path) -> None:
    made = Deployment(
        tmp_path, {}, settings=SETTINGS + '\n[server.store]\nkind = "memory"\n', fronts=1
    )
    try:
        made.fronts[0].start()
        cron = made.call(
            "POST", "/crons", json={"schedule": "* * * * * *", "message": {"body": "mem"}}
        ).json()
        _until(lambda: made.calls("mem") >= 3, "three runs")
        made.call("PATCH", f"/crons/{cron['id']}", json={"paused": True})
        time.sleep(1.2)
        assert made.calls("mem") == made.call("GET", f"/crons/{cron['id']}").json()["runs"]
        assert not (tmp_path / "data" / "mail.db").exists()  # memory indeed
    finally:
        made.stop()


HOOKED = """
[server.crons]
min_interval = 1
rescan_interval = 0.5

[server.webhooks]
allowed_hosts = ["127.0.0.1"]
max_request_webhooks_per_caller = 2
poll_interval = 0.2
"""


def test_a_cron_every_second_keeps_one_webhook_for_all_its_runs(tmp_path: Path) -> None:
    made = Deployment(tmp_path, {}, settings=HOOKED, fronts=1)
    receiver = ReceiverProcess(free_port(), tmp_path).start()
    try:
        made.fronts[0].start()
        hook = {"url": receiver.url("/often"), "events": ["task.completed"]}
        body = {"schedule": "* * * * * *", "message": {"body": "often"}, "webhook": hook}
        cron = made.call("POST", "/crons", json=body).json()
        signer = Webhook(cron["webhook"]["secret"])  # a run may deliver before we read it

        def completed() -> set[str]:
            found = set()
            for entry in receiver.received("/often"):
                signer.verify(entry["body"].encode(), entry["headers"])  # the cron's secret
                found.add(ReceiverProcess.payload(entry)["data"]["task_id"])
            return found

        # More runs than the caller may have per-request webhooks (2): none refused.
        _until(lambda: len(completed()) >= 5, "five runs' task.completed", timeout=60)
        paused = made.call("PATCH", f"/crons/{cron['id']}", json={"paused": True}).json()
        time.sleep(1.5)  # a run claimed just before the pause starts meanwhile
        seen = made.call("GET", f"/crons/{cron['id']}").json()
        assert paused["paused"] and seen["last_error"] is None, seen
        _until(lambda: len(completed()) == seen["runs"], "every run's task.completed")
        hooks = made.call("GET", "/webhooks").json()["webhooks"]
        assert [h["url"] for h in hooks] == [hook["url"]], hooks  # one, for all the runs
        assert made.call("DELETE", f"/crons/{cron['id']}").status_code == 204
        assert made.call("GET", "/webhooks").json()["webhooks"] == []  # gone with the cron
    finally:
        receiver.stop()
        made.stop()
