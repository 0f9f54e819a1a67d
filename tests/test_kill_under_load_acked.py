"""Acknowledged means stored, under load: kill -9 while many tasks are in flight.

A real `mail server` (SQLite, the default; PostgreSQL in a schema of this test's own) gets
many concurrent messages at once: plain echoes, breakpoint pauses and streams, so each
write batch holds several writes of many task records (merged by `coalesce_writes`). Once a
good share were answered the server is killed with SIGKILL while the rest are in flight.
A new server on the same store must list every task whose answer (or, for a stream, whose
first SSE event) the caller got, in the state that answer said: completed with the echoed
answer, or paused at its breakpoint, which a resume then completes.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(400)

TASKS = 90
KILL_AFTER = 45  # answers received before the kill


@pytest.fixture(params=["sqlite", "postgres"])
def store_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    with scratch_schema("mail_a40_kill", BASE_URL) as schema:
        yield {"DATABASE_URL": with_search_path(BASE_URL, schema)}


def _server(directory: Path, env: dict[str, str]) -> ServerProcess:
    port = free_port()
    config = write_config(directory, port=port, extra="task_message_limit = 0\n")
    return ServerProcess(directory, port, args=["--config", str(config)], env=env).start()


def _body(i: int) -> str:
    return f"BREAKPOINT review {i}" if i % 3 == 0 else f"hello {i}"


def test_every_acknowledged_task_survives_kill_under_load(
    store_env: dict[str, str], tmp_path: Path
) -> None:
    write_stub_swarms(tmp_path)
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    env = {**store_env, "MAIL_STUB_LATENCY_MS": "30"}
    ids = [str(uuid.uuid4()) for _ in range(TASKS)]
    acked: dict[str, Any] = {}  # task id -> what the caller was told
    lock = threading.Lock()
    enough = threading.Event()

    first = _server(tmp_path, env)
    url = first.base_url

    def send(i: int) -> None:
        payload = {"body": _body(i), "task_id": ids[i]}
        try:
            if i % 4 == 1:  # a stream: acknowledged by its first event
                with httpx.stream(
                    "POST",
                    f"{url}/message",
                    json={**payload, "stream": True},
                    headers=auth(key),
                    timeout=60,
                ) as response:
                    if response.status_code != 200:
                        return
                    for line in response.iter_lines():
                        if line.startswith("data:") or line.startswith("event:"):
                            told: Any = "streamed"
                            break
                    else:
                        return
            else:
                response = httpx.post(f"{url}/message", json=payload, headers=auth(key), timeout=60)
                if response.status_code != 200:
                    return
                told = response.json()["response"]
        except httpx.HTTPError:
            return
        with lock:
            acked[ids[i]] = told
            if len(acked) >= KILL_AFTER:
                enough.set()

    try:
        with cf.ThreadPoolExecutor(TASKS) as pool:
            futures = [pool.submit(send, i) for i in range(TASKS)]
            assert enough.wait(120), f"only {len(acked)} answers:\n{first.logs()[-3000:]}"
            assert first.proc is not None
            first.proc.kill()  # kill -9 with the rest in flight
            first.proc.wait(10)
            for future in futures:
                future.result()
    finally:
        if first.proc is not None and first.proc.poll() is None:
            first.proc.kill()
    with lock:
        told_before = dict(acked)
    assert len(told_before) >= KILL_AFTER

    second = _server(tmp_path, env)
    try:
        listed = httpx.get(f"{second.base_url}/tasks", headers=auth(key), timeout=30).json()
        missing = [t for t in told_before if t not in listed]
        assert not missing, f"{len(missing)} acknowledged task(s) lost: {missing[:5]}"
        for i, task_id in enumerate(ids):
            if task_id not in told_before or told_before[task_id] == "streamed":
                continue
            record = listed[task_id]
            if _body(i).startswith("BREAKPOINT"):
                assert json.loads(told_before[task_id])[0]["name"] == "human_review"
                assert record.get("state") == "waiting_for_breakpoint", record
                assert record["is_running"] is False, record
                resumed = httpx.post(
                    f"{second.base_url}/message",
                    json={
                        "body": "",
                        "task_id": task_id,
                        "resume_from": "breakpoint_tool_call",
                        "kwargs": {"breakpoint_tool_call_result": f"ok {i}"},
                    },
                    headers=auth(key),
                    timeout=60,
                )
                assert resumed.status_code == 200, resumed.text
                assert resumed.json()["response"] == f"reviewed: ok {i}"
            else:
                assert told_before[task_id] == f"echo[alice]: hello {i}"
                assert record["completed"] is True and record["is_running"] is False, record
                assert record.get("state") == "completed", record
                # The listing's `answer` comes from the summary saved when the finished task
                # left memory (maybe not yet at the kill); the task itself has its answer.
                task = httpx.get(
                    f"{second.base_url}/task",
                    params={"task_id": task_id},
                    headers=auth(key),
                    timeout=30,
                )
                assert task.status_code == 200, task.text
                assert f"echo[alice]: hello {i}" in task.text
    finally:
        assert second.stop() == 0, second.logs()
