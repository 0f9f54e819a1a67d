"""Running tasks survive kill -9: a real `mail server` on SQLite (the default) and PostgreSQL.

A supervisor fans out to two workers whose calls take 200 ms. The server is killed (SIGKILL)
while the first worker call is in flight; a new server on the same database continues the
task without any request that would drive it: a subscriber that reattaches with the last event
id it saw gets the rest of the events (contiguous ids, none twice) ending with task_complete.
A task paused at a breakpoint stays paused across the kill and resumes afterwards. A task's
own step limit (the request's ``kwargs.max_steps``) holds for the run continued after the kill.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.support.durable_agents import swarms_json
from tests.support.store_backends import DurableStore, durable_store  # noqa: F401 - fixture
from tests.test_persistence_e2e import database  # noqa: F401 - the fixture

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
)

pytestmark = pytest.mark.timeout(180)


def _server(
    directory: Path,
    swarm: str,
    port: int,
    store: DurableStore,
    gate: Path | None = None,
    gate_from: int = 1,
) -> ServerProcess:
    config = write_config(directory, port=port, swarm=swarm)
    env = {
        **store.env,
        "MAIL_STUB_LATENCY_MS": "200",
        "MAIL_DURABLE_CALL_LOG": str(directory / "calls.log"),
    }
    if gate is not None:
        env["MAIL_DURABLE_GATE"] = str(gate)
        env["MAIL_DURABLE_GATE_FROM"] = str(gate_from)
    return ServerProcess(directory, port, args=["--config", str(config)], env=env)


def _calls(directory: Path) -> list[tuple[str, str]]:
    path = directory / "calls.log"
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines()]  # type: ignore[misc]


def _wait_for(condition, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _stored_event_ids(store: DurableStore, swarm: str, task_id: str) -> list[int]:
    rows = store.fetch(
        "SELECT event_id FROM task_events WHERE swarm_name = $1 AND task_id = $2",
        swarm,
        task_id,
    )
    return sorted(int(r["event_id"]) for r in rows)


def _histories(store: DurableStore, swarm: str, task_id: str) -> dict[str, list[dict[str, object]]]:
    # a history's rows are its segments, joined in the order of `start` (docs/database.md)
    rows = store.fetch(
        "SELECT agent_name, history FROM agent_histories WHERE swarm_name = $1 AND task_id = $2"
        " ORDER BY agent_name, start",
        swarm,
        task_id,
    )
    out: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        history = row["history"]
        segment = json.loads(history) if isinstance(history, str) else history
        out.setdefault(row["agent_name"], []).extend(segment)
    return out


def test_task_running_at_kill_completes_after_restart(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    swarm = f"durable-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    task_id = str(uuid.uuid4())

    first = _server(tmp_path, swarm, port, durable_store).start()
    seen: list[str] = []
    sent: dict[int, tuple[str | None, str]] = {}  # id -> (event, data) as the client got it

    def read_stream() -> None:  # a client on the stream until the server dies
        try:
            with httpx.stream(
                "POST",
                f"{first.base_url}/message",
                json={"body": "FANOUT go", "task_id": task_id, "stream": True},
                headers=auth(key),
                timeout=30,
            ) as response:
                assert response.status_code == 200
                for event in parse_sse_stream(response):
                    if event.id and event.event != "ping":
                        sent[int(event.id)] = (event.event, event.data)
                        seen.append(event.id)
        except httpx.HTTPError:
            pass  # the kill

    client = threading.Thread(target=read_stream)
    client.start()
    try:
        # The first worker call has started (it takes 200 ms).
        _wait_for(
            lambda: any(name.startswith("worker") for name, _pid in _calls(tmp_path)),
            30,
            "a worker call",
        )
        assert seen, "no event reached the client before the worker call"
    finally:
        assert first.proc is not None
        first.proc.kill()  # kill -9: no shutdown hooks run
        first.proc.wait(10)
        client.join(30)
    # Killed without waiting: an event leaves only once it is stored (docs/database.md).
    last_seen = int(seen[-1])
    assert _stored_event_ids(durable_store, swarm, task_id)[:last_seen] == list(
        range(1, last_seen + 1)
    )
    first_pid = str(first.proc.pid)
    before = _calls(tmp_path)
    # Killed mid-task: the workers had not both answered.
    assert sum(1 for name, _ in before if name == "supervisor") == 1, before

    second = _server(tmp_path, swarm, port, durable_store).start()
    try:
        # Nothing is sent: only a subscriber reattaching after the last id it saw.
        events = []
        with httpx.stream(
            "GET",
            f"{second.base_url}/task/events",
            params={"task_id": task_id},
            headers={**auth(key), "Last-Event-ID": str(last_seen)},
            timeout=30,
        ) as response:
            assert response.status_code == 200, response.read()
            deadline = time.monotonic() + 30
            for event in parse_sse_stream(response):
                assert time.monotonic() < deadline, f"task did not continue: {events}"
                if event.event == "ping":
                    continue
                events.append(event)
                if event.event in ("task_complete", "task_error") and event.id is None:
                    break
        closing = events[-1]
        assert closing.event == "task_complete", [e.event for e in events]
        assert closing.json()["response"] == "both: worked(worker1): go A + worked(worker2): go B"
        ids = [int(e.id) for e in events if e.id is not None]
        assert ids == list(range(last_seen + 1, last_seen + 1 + len(ids))), ids
        # The stored task_complete (as a POST /message waiter stores it) is among them.
        assert [e.event for e in events if e.id is not None][-1] == "task_complete"

        record = httpx.get(
            f"{second.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
        ).json()
        assert record["completed"] is True
        all_ids = [int(e["id"]) for e in record["events"]]
        assert all_ids == list(range(1, len(all_ids) + 1))
        # No id the first client got was issued again with other content.
        stored = {int(e["id"]): e for e in record["events"]}
        for number, (name, data) in sent.items():
            assert stored[number]["event"] == name, (number, name, stored[number])
            again = stored[number]["data"]
            assert json.loads(data) == (json.loads(again) if isinstance(again, str) else again)
        assert all_ids[-1] == ids[-1]
    finally:
        assert second.stop() == 0, second.logs()

    after = _calls(tmp_path)[len(before) :]
    second_pid = str(second.proc.pid)
    assert all(pid == second_pid for _, pid in after)
    # The interrupted worker turns ran again (at-least-once model calls), the supervisor's
    # finished turn did not; it was called again only for the answers.
    assert {name for name, _ in after if name.startswith("worker")} == {"worker1", "worker2"}
    assert not any(name == "supervisor" and pid == first_pid for name, pid in after)

    assert _stored_event_ids(durable_store, swarm, task_id) == all_ids
    histories = _histories(durable_store, swarm, task_id)
    for worker in ("worker1", "worker2"):
        incoming = [
            h for h in histories[worker] if "<incoming_message>" in str(h.get("content", ""))
        ]
        assert len(incoming) == 1, (worker, histories[worker])  # the re-run left no duplicate
    supervisor_text = json.dumps(histories["supervisor"])
    assert supervisor_text.count("FANOUT go") == 1
    journal = durable_store.fetch(
        "SELECT items FROM task_queues WHERE swarm_name = $1 AND task_id = $2",
        swarm,
        f"{task_id}::journal",
    )
    assert journal == []  # no pending work left behind


def test_breakpoint_pause_survives_kill_and_resumes(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    swarm = f"durable-bp-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "bob")
    port = free_port()
    task_id = str(uuid.uuid4())

    first = _server(tmp_path, swarm, port, durable_store).start()
    try:
        r = httpx.post(
            f"{first.base_url}/message",
            json={"body": "BREAKPOINT check this", "task_id": task_id},
            headers=auth(key),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert json.loads(r.json()["response"])[0]["name"] == "human_review"
        count = len(
            httpx.get(
                f"{first.base_url}/task", params={"task_id": task_id}, headers=auth(key)
            ).json()["events"]
        )
        _wait_for(
            lambda: len(_stored_event_ids(durable_store, swarm, task_id)) >= count,
            5,
            "stored events",
        )
    finally:
        assert first.proc is not None
        first.proc.kill()
        first.proc.wait(10)
    calls_before = len(_calls(tmp_path))

    second = _server(tmp_path, swarm, port, durable_store).start()
    try:
        record = httpx.get(
            f"{second.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
        ).json()
        # Still paused: nothing ran by itself after the restart.
        assert record["completed"] is True and record["is_running"] is False
        assert record["pending_breakpoints"], record
        assert len(record["events"]) == count
        assert len(_calls(tmp_path)) == calls_before

        r = httpx.post(
            f"{second.base_url}/message",
            json={
                "body": "",
                "task_id": task_id,
                "resume_from": "breakpoint_tool_call",
                "kwargs": {"breakpoint_tool_call_result": "approved"},
            },
            headers=auth(key),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.json()["response"] == "reviewed: approved"
    finally:
        assert second.stop() == 0, second.logs()


@pytest.mark.parametrize(
    ("max_steps", "killed_at"),
    [(6, 1), (5, 5)],
    ids=["first-call", "forced-finish"],
)
def test_a_requests_max_steps_holds_after_a_kill(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
    max_steps: int,
    killed_at: int,
) -> None:
    """A supervisor that would ask a worker for ever, limited by its request's max_steps, is
    killed while model call `killed_at` hangs: its first call (the continued task counts
    against the same limit, where the server's task_message_limit of 15 applied before),
    or its last one, the limit's forced finish (the supervisor is given a worker's answer at
    the limit: the re-run is still the forced finish, where before it asked the worker again
    and finished one call later). Either way it ends by the forced finish."""
    swarm = f"durable-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    gate = tmp_path / "gate"  # model calls from `killed_at` on hang until it exists
    first = _server(tmp_path, swarm, port, durable_store, gate, gate_from=killed_at).start()
    try:
        accepted = httpx.post(
            f"{first.base_url}/message",
            json={"body": "CHATTY go", "background": True, "kwargs": {"max_steps": max_steps}},
            headers=auth(key),
            timeout=30,
        )
        assert accepted.status_code == 202, accepted.text
        task_id = accepted.json()["task_id"]
        _wait_for(lambda: len(_calls(tmp_path)) >= killed_at, 30, f"model call {killed_at}")
        if killed_at > 1:  # and the turns before it are stored (else they too are in flight)

            def stored_turns() -> int:
                histories = _histories(durable_store, swarm, task_id)
                return sum(m.get("role") == "assistant" for h in histories.values() for m in h)

            _wait_for(lambda: stored_turns() >= killed_at - 1, 30, "the earlier turns stored")
    finally:
        assert first.proc is not None
        first.proc.kill()  # kill -9: no shutdown hooks run
        first.proc.wait(10)
    before = len(_calls(tmp_path))
    assert before == killed_at, _calls(tmp_path)
    gate.touch()

    second = _server(tmp_path, swarm, port, durable_store, gate).start()
    try:

        def finished() -> bool:
            record = httpx.get(
                f"{second.base_url}/task",
                params={"task_id": task_id},
                headers=auth(key),
                timeout=10,
            ).json()
            return bool(record.get("completed"))

        _wait_for(finished, 60, "the task to end")
        record = httpx.get(
            f"{second.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
        ).json()
    finally:
        assert second.stop() == 0, second.logs()
    after = len(_calls(tmp_path)) - before
    assert "stopped by max_steps" in json.dumps(record), {
        k: v for k, v in record.items() if k != "events"
    }
    # max_steps calls in all, besides the call in flight at the kill, made again (at most
    # once per crash).
    assert after >= 1 and before + after <= max_steps + 1, (before, after)
