"""Background messages over real HTTP: ``POST /message`` answered 202 once stored.

A real `mail server` runs a supervisor that asks a slow worker (tests/support/
multitask_agents.py); a real receiver process verifies the webhook deliveries with the
`standardwebhooks` library. A background message (``"background": true`` or ``Prefer:
respond-async``) is answered as soon as its task is stored, as fast as a message whose task
answers at once; its task completes and reaches the message's own webhook; every check of a
plain message applies (a bad entrypoint, the enqueue bound, an Idempotency-Key's repeat). A
kill -9 right after the 202 loses nothing, on SQLite and on PostgreSQL: the restarted server
continues the task by itself (nobody asks for it), and its webhook is delivered.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.multitask_agents import swarms_json
from tests.support.store_backends import (
    DurableStore,
    scratch_durable_store,
    scratch_store_fixture,
)
from tests.support.webhook_receiver import ReceiverProcess
from tests.test_persistence_e2e import database  # noqa: F401 - the fixture

from server_fixtures import (
    SingleServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
)

pytestmark = pytest.mark.timeout(300)

SETTINGS = """max_enqueued_messages_per_task = 1

[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.2, 0.2]
retry_jitter = 0.1
poll_interval = 0.2
"""

# A schema of its own on PostgreSQL: another run's running tasks in the shared database would
# be continued beside this test's (and a stopped run leaves some).
durable_store = scratch_store_fixture("mail_bg")


class Deployment:
    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        (root / "swarms.json").write_text(json.dumps(swarms_json("bg")), encoding="utf-8")
        self.root, self.env = root, {"MAIL_MULTITASK_LOG": str(root / "calls.log"), **(env or {})}
        self.key = create_key(root / "registries" / "keys.json", "user", "alice")
        self.receiver = ReceiverProcess(free_port(), root).start()
        self.server = self.start()

    def start(self) -> SingleServerProcess:
        port = free_port()
        config = write_config(self.root, port=port, swarm="bg", extra=SETTINGS)
        return SingleServerProcess(
            self.root, port, args=["--config", str(config)], env=self.env
        ).start()

    def post(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        return httpx.post(
            f"{self.server.base_url}/message",
            json=body,
            headers={**auth(self.key), **headers},
            timeout=60,
        )

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.server.base_url}{path}", headers=auth(self.key), timeout=60)

    def hook(self, path: str) -> dict[str, Any]:
        return {"url": self.receiver.url(path), "events": ["task.*"]}

    def completed(self, path: str, timeout: float = 60) -> dict[str, Any]:
        """The `task.completed` delivery to `path`, verified."""
        deadline = time.monotonic() + timeout
        while True:
            for entry in self.receiver.received(path):
                payload = ReceiverProcess.payload(entry)
                if payload["type"] == "task.completed":
                    assert entry["verified"] is True, entry
                    return payload  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, self.receiver.received(path)
            time.sleep(0.05)

    def worker_calls(self, body: str) -> int:
        path = self.root / "calls.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return lines.count(f"worker start {body}")

    def stop(self) -> None:
        try:
            self.server.stop()
        finally:
            self.receiver.stop()


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path)
    try:
        yield made
    finally:
        made.stop()


def _timed(call: Any) -> tuple[float, httpx.Response]:
    began = time.perf_counter()
    response = call()
    return time.perf_counter() - began, response


def test_a_background_message_is_answered_once_stored_and_reaches_its_webhook(
    deployment: Deployment,
) -> None:
    # A plain acknowledged write: a message whose task answers at once (its answer is stored
    # before it leaves).
    plain = []
    for n in range(7):
        took, r = _timed(lambda n=n: deployment.post({"body": f"quick {n}"}))
        assert r.status_code == 200 and r.json()["response"] == f"echo: quick {n}", r.text
        plain.append(took)
    # Background messages whose tasks take two seconds each.
    accepted, waited = [], []
    for n in range(7):
        body = {
            "body": f"ASK SLOW 2 bg-{n}",
            "background": True,
            "webhook": deployment.hook(f"/bg{n}"),
        }
        took, r = _timed(lambda body=body: deployment.post(body))
        assert r.status_code == 202, r.text
        waited.append(took)
        accepted.append(r)
    print(
        f"plain median {statistics.median(plain) * 1000:.1f} ms, "
        f"background median {statistics.median(waited) * 1000:.1f} ms"
    )
    assert max(waited) < 2.0  # not after the task
    assert statistics.median(waited) <= 3 * statistics.median(plain) + 0.25

    for n, r in enumerate(accepted):
        body = r.json()
        task_id = body["task_id"]
        assert r.headers["location"] == f"/task/{task_id}" == body["status_url"]
        assert body["events_url"] == f"/task/events?task_id={task_id}"
        assert body["state"] == "running"
        assert "preference-applied" not in r.headers
        deployment.receiver.secrets(f"/bg{n}", body["webhook"]["secret"])
    for n, r in enumerate(accepted):
        payload = deployment.completed(f"/bg{n}")
        assert payload["data"]["task_id"] == r.json()["task_id"]
        assert payload["data"]["summary"] == f"done: worked: bg-{n}"
        # Polling the Location finds the same answer.
        record = deployment.get(r.headers["location"]).json()
        assert record["completed"] is True and record["state"] == "completed"
        assert record["answer"] == f"done: worked: bg-{n}"


def test_prefer_respond_async_and_following_the_event_stream(deployment: Deployment) -> None:
    r = deployment.post({"body": "ASK SLOW 1 preferred"}, Prefer="wait=10, respond-async")
    assert r.status_code == 202, r.text
    assert r.headers["preference-applied"] == "respond-async"
    task_id = r.json()["task_id"]
    seen: list[str] = []
    with httpx.stream(
        "GET",
        f"{deployment.server.base_url}/task/events",
        params={"task_id": task_id},
        headers=auth(deployment.key),
        timeout=60,
    ) as stream:
        for event in parse_sse_stream(stream):
            if event.event == "ping":
                continue
            if event.id is None:
                closing = event
                break
            seen.append(event.id)
    assert closing.event == "task_complete"
    assert closing.json()["response"] == "done: worked: preferred"
    # Following again after an event seen (Last-Event-ID): only what came after it.
    with httpx.stream(
        "GET",
        f"{deployment.server.base_url}/task/events",
        params={"task_id": task_id},
        headers={**auth(deployment.key), "Last-Event-ID": seen[1]},
        timeout=60,
    ) as stream:
        again = [e.id for e in parse_sse_stream(stream) if e.id is not None]
    assert again == seen[2:]


def test_a_background_message_meets_every_check_of_a_plain_one(deployment: Deployment) -> None:
    both = deployment.post({"body": "x", "background": True, "stream": True})
    assert both.status_code == 400 and "stream" in both.json()["detail"]
    wrong = deployment.post({"body": "x", "background": True, "entrypoint": "nobody"})
    assert wrong.status_code == 400, wrong.text
    bad = deployment.post({"body": "x", "background": True, "multitask_strategy": "later"})
    assert bad.status_code == 400 and "multitask_strategy" in bad.json()["detail"]

    # A running task refuses it by default, as it refuses a plain message.
    hook = {"url": deployment.receiver.url("/multitask"), "events": ["task.multitask"]}
    first = deployment.post({"body": "ASK SLOW 3 checked", "background": True, "webhook": hook})
    task_id = first.json()["task_id"]
    deployment.receiver.secrets("/multitask", first.json()["webhook"]["secret"])
    deadline = time.monotonic() + 30
    while not deployment.worker_calls("SLOW 3 checked"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    refused = deployment.post({"body": "again", "task_id": task_id, "background": True})
    assert refused.status_code == 409, refused.text
    # One may wait behind it (max_enqueued_messages_per_task = 1); the next is refused.
    queued = deployment.post(
        {"body": "COUNT", "task_id": task_id, "background": True, "multitask_strategy": "enqueue"}
    )
    assert queued.status_code == 202, queued.text
    over = deployment.post(
        {"body": "more", "task_id": task_id, "background": True, "multitask_strategy": "enqueue"}
    )
    assert over.status_code == 429 and "max_enqueued_messages_per_task" in over.json()["detail"]

    # A keyed repeat answers the same 202, and runs nothing a second time.
    key = {"Idempotency-Key": f'"{uuid.uuid4()}"'}
    body = {"body": "ASK SLOW 0.5 keyed", "background": True}
    once = deployment.post(body, **key)
    twice = deployment.post(body, **key)
    assert once.status_code == twice.status_code == 202, (once.text, twice.text)
    assert twice.json()["task_id"] == once.json()["task_id"]
    assert twice.headers["location"] == once.headers["location"]
    assert twice.headers["idempotent-replayed"] == "true"
    deadline = time.monotonic() + 30
    while deployment.get(once.headers["location"]).json()["state"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert deployment.worker_calls("SLOW 0.5 keyed") == 1
    # `Prefer: respond-async` is the body's "background": the same request for a key, and
    # not the same request as a plain message that waits for its answer.
    preferred = deployment.post({"body": "ASK SLOW 0.5 keyed"}, Prefer="respond-async", **key)
    assert preferred.status_code == 202, preferred.text
    assert preferred.json()["task_id"] == once.json()["task_id"]
    plain_key = {"Idempotency-Key": f'"{uuid.uuid4()}"'}
    waited = deployment.post({"body": "ASK plain keyed"}, **plain_key)
    assert waited.status_code == 200, waited.text
    refused = deployment.post({"body": "ASK plain keyed"}, Prefer="respond-async", **plain_key)
    assert refused.status_code == 422, refused.text
    # The enqueued message went in after the task's answer.
    deadline = time.monotonic() + 30
    while (record := deployment.get(f"/task?task_id={task_id}").json())["answer"] != (
        "callers: ASK SLOW 3 checked | COUNT"
    ):
        assert time.monotonic() < deadline, record["answer"]
        time.sleep(0.05)
    # The task's webhook was told of the strategy applied: queued, then delivered.
    pushed = deployment.receiver.wait_for(2, "/multitask")
    assert all(entry["verified"] for entry in pushed), pushed
    payloads = [ReceiverProcess.payload(entry) for entry in pushed]
    assert [p["type"] for p in payloads] == ["task.multitask", "task.multitask"]
    details = [p["data"]["detail"] for p in payloads]
    assert [(d["strategy"], d["action"]) for d in details] == [
        ("enqueue", "queued"),
        ("enqueue", "delivered"),
    ]
    assert details[0]["position"] == 1 and details[0]["message_id"] == details[1]["message_id"]


def test_a_background_task_survives_kill_9_right_after_its_202(
    durable_store: DurableStore,
    tmp_path: Path,
) -> None:
    made = Deployment(tmp_path, durable_store.env)
    try:
        hook = made.hook("/survivor")
        r = made.post({"body": "ASK SLOW 1 survivor", "background": True, "webhook": hook})
        assert r.status_code == 202, r.text
        assert made.server.proc is not None
        made.server.proc.kill()  # kill -9 right after the 202: no shutdown hook runs
        made.server.proc.wait(10)
        made.receiver.secrets("/survivor", r.json()["webhook"]["secret"])
        made.server = made.start()
        healthy = time.monotonic()
        task_id = r.json()["task_id"]
        # Nobody asks for it: the restarted server continues the stored task by itself, and
        # the caller learns of its end from the webhook alone.
        payload = made.completed("/survivor")
        print(f"{durable_store.kind}: healthy to task.completed {time.monotonic() - healthy:.2f} s")
        assert payload["data"]["task_id"] == task_id
        assert payload["data"]["summary"] == "done: worked: survivor"
        record = made.get(f"/task?task_id={task_id}").json()
        assert record["state"] == "completed" and record["answer"] == "done: worked: survivor"
        # The worker's call the kill cut short ran again (at least once), then the task ended.
        assert made.worker_calls("SLOW 1 survivor") in (1, 2)
    finally:
        made.stop()


def test_a_stored_task_whose_instance_cannot_be_made_any_more_is_marked_failed(
    tmp_path: Path,
) -> None:
    made = Deployment(tmp_path)
    try:
        r = made.post({"body": "ASK SLOW 30 doomed", "background": True})
        assert r.status_code == 202, r.text
        task_id = r.json()["task_id"]
        assert made.server.proc is not None
        made.server.proc.kill()
        made.server.proc.wait(10)
        # The swarm's agents cannot be made any more: the start-up resume gives up on them,
        # in one line, and marks the task failed.
        made.env = {**made.env, "MAIL_MULTITASK_BROKEN_FACTORY": "the model key is gone"}
        made.server = made.start()
        deadline = time.monotonic() + 60
        while "they are marked failed" not in (logs := made.server.logs()):
            assert time.monotonic() < deadline, logs
            time.sleep(0.05)
        line = next(x for x in logs.splitlines() if "they are marked failed" in x)
        assert "user:alice" in line and "the model key is gone" in line
        made.server.stop()
        # Mended, the server does not run it again: it is failed, with the reason.
        made.env.pop("MAIL_MULTITASK_BROKEN_FACTORY")
        made.server = made.start()
        record = made.get(f"/task?task_id={task_id}").json()
        assert record["state"] == "failed" and record["completed"] is True, record
        assert "could not be loaded after a restart" in record["answer"], record
        assert "the model key is gone" in record["answer"], record
        assert made.worker_calls("SLOW 30 doomed") <= 1
    finally:
        made.stop()


def test_a_server_killed_again_right_after_resuming_resumes_at_its_next_start(
    database: str,  # noqa: F811 - requires PostgreSQL
    tmp_path: Path,
) -> None:
    # A crash loop: the restarted server claims the instance to continue its task and dies
    # within the claim window; the next start sees the claim of a process of this machine
    # that is gone and continues the task at once, not at the caller's next request.
    with scratch_durable_store("postgres", tmp_path, "mail_bg_loop") as store:
        made = Deployment(tmp_path, store.env)
        try:
            hook = made.hook("/loop")
            r = made.post({"body": "ASK SLOW 1 loop", "background": True, "webhook": hook})
            assert r.status_code == 202, r.text
            made.receiver.secrets("/loop", r.json()["webhook"]["secret"])
            for _ in range(2):
                assert made.server.proc is not None
                made.server.proc.kill()
                made.server.proc.wait(10)
                made.server = made.start()
                deadline = time.monotonic() + 30
                while "continuing the running tasks of user:alice" not in made.server.logs():
                    assert "are left to the server" not in made.server.logs()
                    assert time.monotonic() < deadline, made.server.logs()
                    time.sleep(0.05)
            payload = made.completed("/loop")
            assert payload["data"]["task_id"] == r.json()["task_id"]
            assert payload["data"]["summary"] == "done: worked: loop"
        finally:
            made.stop()


def test_two_servers_started_together_on_one_database_resume_a_task_once(
    database: str,  # noqa: F811 - requires PostgreSQL
    tmp_path: Path,
) -> None:
    with scratch_durable_store("postgres", tmp_path, "mail_bg_two") as store:
        made = Deployment(tmp_path, store.env)
        other: SingleServerProcess | None = None
        try:
            hook = made.hook("/once")
            r = made.post({"body": "ASK SLOW 2 once", "background": True, "webhook": hook})
            assert r.status_code == 202, r.text
            task_id = r.json()["task_id"]
            deadline = time.monotonic() + 30
            while not made.worker_calls("SLOW 2 once"):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert made.server.proc is not None
            made.server.proc.kill()  # the worker's call is cut short
            made.server.proc.wait(10)
            made.receiver.secrets("/once", r.json()["webhook"]["secret"])
            # Two servers on the database, each in a folder of its own, started together.
            second = tmp_path / "second"
            (second / "registries").mkdir(parents=True)
            shutil.copy(tmp_path / "registries" / "keys.json", second / "registries")
            servers = []
            for folder in (tmp_path, second):
                port = free_port()
                config = write_config(
                    folder,
                    port=port,
                    swarm="bg",
                    source=str(tmp_path / "swarms.json"),
                    extra=SETTINGS,
                )
                args = ["--config", str(config)]
                servers.append(SingleServerProcess(folder, port, args=args, env=made.env))
            made.server, other = servers
            for server in servers:
                server.start(wait=False)
            for server in servers:
                server.wait_healthy()
            payload = made.completed("/once")
            assert payload["data"]["task_id"] == task_id
            assert payload["data"]["summary"] == "done: worked: once"
            # Each server made up its mind: one continued the task, the other left it alone.
            deadline = time.monotonic() + 30
            while True:
                logs = [server.logs() for server in servers]
                went_on = [x for x in logs if "continuing the running tasks of user:alice" in x]
                left = [x for x in logs if "tasks of user:alice are left to the server" in x]
                if went_on and left:
                    break
                assert time.monotonic() < deadline, logs
                time.sleep(0.05)
            assert len(went_on) == len(left) == 1
            # The call the kill cut short, then its one re-run; one completion delivered.
            assert made.worker_calls("SLOW 2 once") == 2
            deliveries = [
                ReceiverProcess.payload(entry)["type"] for entry in made.receiver.received("/once")
            ]
            assert deliveries.count("task.completed") == 1, deliveries
        finally:
            if other is not None:
                other.stop()
            made.stop()
