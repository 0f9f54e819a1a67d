"""kill -9 at random points of a running multi-hop task, on the default SQLite file and on
PostgreSQL: a restarted server continues the task from its journal.

The supervisor of tests/support/durable_agents.py fans out to two workers and answers with
both answers (four model calls over three agents, 80 ms each: some 300 ms in all). Each round kills the server
after a random delay (anywhere from the first store write to the task's end), starts a new
one on the same database and reattaches to the task: the task completes with the full
answer, its stored events are numbered without gap, no agent saw a message twice (a turn
re-run after the kill starts from where its interrupted run began), and no journal row is
left. The delays come from a seed printed on failure.

The second test counts model calls across kills (a real model server; see its comment).
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.durable_agents import swarms_json
from tests.support.store_backends import DurableStore, durable_store  # noqa: F401 - fixture
from tests.test_durable_restart import _histories, _stored_event_ids
from tests.test_persistence_e2e import database  # noqa: F401 - the fixture

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.llm_thread import ThreadedLLM
from support.scripted_llm import hang, reply, tool_call

pytestmark = pytest.mark.timeout(300)

ROUNDS = 5
ANSWER = "both: worked(worker1): go A + worked(worker2): go B"


def _server(directory: Path, swarm: str, port: int, store: DurableStore) -> ServerProcess:
    config = write_config(directory, port=port, swarm=swarm)
    env = {**store.env, "MAIL_STUB_LATENCY_MS": "80"}
    return ServerProcess(directory, port, args=["--config", str(config)], env=env)


def _post_and_kill(server: ServerProcess, key: str, task_id: str, delay: float) -> None:
    """Start the task and kill the server `delay` seconds after the request was sent."""
    assert server.proc is not None
    killer = threading.Timer(delay, server.proc.kill)
    try:
        with httpx.stream(
            "POST",
            f"{server.base_url}/message",
            json={"body": "FANOUT go", "task_id": task_id, "stream": True},
            headers=auth(key),
            timeout=30,
        ) as response:
            killer.start()
            assert response.status_code == 200
            for _ in response.iter_lines():
                pass
    except httpx.HTTPError:
        pass  # the server died under the stream
    finally:
        killer.join()
        server.proc.kill()  # kill -9 (if the task ended first: the kill comes after it)
        server.proc.wait(10)


def _continue(server: ServerProcess, key: str, task_id: str) -> dict[str, object] | None:
    """The task's record once it completed on the restarted server (None: never stored)."""
    deadline = time.monotonic() + 60
    while True:
        r = httpx.get(
            f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
        )
        if r.status_code == 404:
            return None  # killed before the task's first write was committed
        assert r.status_code == 200, r.text
        record = r.json()
        if record["completed"]:
            return record  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"task did not continue: {record}"
        time.sleep(0.05)


def test_task_killed_at_random_points_completes_from_its_journal(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("MAIL_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    swarm = f"durable-{uuid.uuid4().hex[:8]}"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms_json(swarm)), encoding="utf-8")
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    continued = 0
    for round_ in range(ROUNDS):
        where = f"seed {seed}, round {round_}"
        task_id = str(uuid.uuid4())
        delay = rng.uniform(0.0, 0.4)
        _post_and_kill(_server(tmp_path, swarm, port, durable_store).start(), key, task_id, delay)
        second = _server(tmp_path, swarm, port, durable_store).start()
        try:
            record = _continue(second, key, task_id)
        finally:
            assert second.stop() == 0, second.logs()
        if record is None:
            continue
        continued += 1
        events: list[dict[str, str]] = record["events"]  # type: ignore[assignment]
        # The answer, once (the supervisor's task_complete call ran to its end once).
        answers = [e for e in events if e["event"] == "task_complete_call"]
        assert len(answers) == 1, (where, delay, events)
        assert any(ANSWER in e["data"] for e in events), (where, delay, events)
        ids = [int(e["id"]) for e in events]
        assert ids == list(range(1, len(ids) + 1)), (where, ids)
        assert _stored_event_ids(durable_store, swarm, task_id) == ids, where
        histories = _histories(durable_store, swarm, task_id)
        for worker in ("worker1", "worker2"):
            incoming = [
                h for h in histories[worker] if "<incoming_message>" in str(h.get("content", ""))
            ]
            assert len(incoming) == 1, (where, worker, histories[worker])
        assert json.dumps(histories["supervisor"]).count("FANOUT go") == 1, where
        journal = durable_store.fetch(
            "SELECT items FROM task_queues WHERE swarm_name = $1 AND task_id = $2",
            swarm,
            f"{task_id}::journal",
        )
        assert journal == [], (where, journal)
    assert continued, f"seed {seed}: every kill came before the task was stored"


# ------------------------------------------------------------------------------------------
# Model calls across crashes: LiteLLM agents answered by the scripted model server on
# 127.0.0.1, which counts every call. A task is TURNS model calls in sequence: the supervisor
# looks something up (an action), then asks the worker four times, one step at a time, and
# completes after the fourth answer (6 supervisor calls + 4 worker calls). Each round runs
# TASKS such tasks, started at random offsets, and kills the server (kill -9) once or twice
# at random points; a restarted server on the same database continues them. Every task
# completes with its answer, and its model calls (counted by the model server, by the task's
# token, which every request of the task carries) are at most TURNS + the kills it lived
# through: after a kill only the turn in flight runs again.

TURNS = 10
STEPS = 4
TASKS = 5
KILL_ROUNDS = 4  # TASKS * KILL_ROUNDS = 20 tries per store
MODEL_LATENCY = 0.03  # seconds per model call


def _counted_swarm(name: str, api_base: str) -> list[dict[str, object]]:
    params = {"llm": "openai/gpt-4o-mini", "use_proxy": False, "api_base": api_base}
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "description": "a supervisor and a worker on a counting model server",
            "keywords": ["test"],
            "public": False,
            "agents": [
                {
                    "name": "supervisor",
                    "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                    "comm_targets": ["worker"],
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "actions": ["lookup"],
                    "agent_params": {**params, "api_key": "k", "system": "You are supervisor."},
                },
                {
                    "name": "worker",
                    "factory": "python::mail.factories.action:LiteLLMActionAgentFunction",
                    "comm_targets": ["supervisor"],
                    "actions": [],
                    "agent_params": {**params, "api_key": "k", "system": "You are worker."},
                },
            ],
            "actions": [
                {
                    "name": "lookup",
                    "description": "Look something up.",
                    "parameters": {
                        "type": "object",
                        "properties": {"query": {"type": "string"}},
                        "required": ["query"],
                    },
                    "function": "python::tests.support.scripted_agents:echo_action",
                }
            ],
        }
    ]


def _counted_reply(request: Any) -> Any:
    """The model: what the agent does next, read from the conversation it was sent."""
    conversation = json.dumps(request.messages)
    token = re.search(r"RUN-[0-9a-f]{12}", conversation)
    run = token.group(0) if token else "RUN-unknown"
    if "You are worker" in request.system_text:
        step = re.findall(r"step (\d+) of RUN", request.last_user_text)
        answer = f"worked step {step[-1] if step else '?'} of {run}"
        call = tool_call("send_response", {"target": "supervisor", "subject": "Re", "body": answer})
    elif "echo: " not in conversation:
        call = tool_call("lookup", {"query": run})
    else:
        done = len(set(re.findall(r"worked step (\d+) of RUN", conversation)))
        if done < STEPS:
            body = f"step {done + 1} of {run}"
            call = tool_call("send_request", {"target": "worker", "subject": "S", "body": body})
        else:
            call = tool_call("task_complete", {"finish_message": f"done {done} steps of {run}"})
    return hang(MODEL_LATENCY, reply(call))


def _counted_server(directory: Path, swarm: str, port: int, store: DurableStore) -> ServerProcess:
    config = write_config(directory, port=port, swarm=swarm)
    return ServerProcess(directory, port, args=["--config", str(config)], env=store.env)


def _post(base_url: str, key: str, task_id: str, token: str, delay: float) -> None:
    time.sleep(delay)
    try:
        httpx.post(
            f"{base_url}/message",
            json={"body": f"please work on {token}", "task_id": task_id},
            headers=auth(key),
            timeout=60,
        )
    except httpx.HTTPError:
        pass  # the server died under the request


def _record(server: ServerProcess, key: str, task_id: str) -> dict[str, Any] | None:
    r = httpx.get(
        f"{server.base_url}/task", params={"task_id": task_id}, headers=auth(key), timeout=10
    )
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_model_calls_after_kills_are_at_most_turns_plus_crashes(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("MAIL_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    swarm = f"counted-{uuid.uuid4().hex[:8]}"
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    with ThreadedLLM() as llm:
        for _ in range(400):  # each queued reply answers one call, whatever agent makes it
            llm.queue(_counted_reply)
        (tmp_path / "swarms.json").write_text(
            json.dumps(_counted_swarm(swarm, llm.base_url)), encoding="utf-8"
        )
        # One task alone, never killed: it takes TURNS model calls.
        server = _counted_server(tmp_path, swarm, port, durable_store).start()
        try:
            token = f"RUN-{uuid.uuid4().hex[:12]}"
            _post(server.base_url, key, str(uuid.uuid4()), token, 0)
            assert len(llm.requests(token)) == TURNS, [r.messages for r in llm.requests(token)]
        finally:
            assert server.stop() == 0, server.logs()
        tries: list[tuple[str, int, int]] = []  # (where, calls, kills)
        for round_ in range(KILL_ROUNDS):
            tasks = {str(uuid.uuid4()): f"RUN-{uuid.uuid4().hex[:12]}" for _ in range(TASKS)}
            kills = 1 + (rng.random() < 0.5)
            server = _counted_server(tmp_path, swarm, port, durable_store).start()
            posts = [
                threading.Thread(
                    target=_post,
                    args=(server.base_url, key, task_id, token, rng.uniform(0, 0.2)),
                )
                for task_id, token in tasks.items()
            ]
            for post in posts:
                post.start()
            for kill in range(kills):
                # Kill while model calls are under way: once the round's calls reach a
                # random count, a random part of a model call later.
                calls = len(llm.requests()) + rng.randint(1, TASKS * TURNS // 2)
                waited = time.monotonic() + 20
                while len(llm.requests()) < calls and time.monotonic() < waited:
                    time.sleep(0.002)
                time.sleep(rng.uniform(0, MODEL_LATENCY * 1.5))
                assert server.proc is not None
                server.proc.kill()
                server.proc.wait(10)
                if kill == 0:
                    for post in posts:
                        post.join()
                server = _counted_server(tmp_path, swarm, port, durable_store).start()
            try:
                deadline = time.monotonic() + 60
                for task_id, token in tasks.items():
                    where = f"seed {seed}, round {round_}, task {token}"
                    while (record := _record(server, key, task_id)) is not None and not record[
                        "completed"
                    ]:
                        assert time.monotonic() < deadline, (where, "did not continue", record)
                        time.sleep(0.05)
                    if record is None:
                        continue  # killed before the task's first write was committed
                    assert any(
                        f"done {STEPS} steps of {token}" in e["data"] for e in record["events"]
                    ), (where, record["events"])
                    tries.append((where, len(llm.requests(token)), kills))
            finally:
                assert server.stop() == 0, server.logs()
    over = [t for t in tries if t[1] > TURNS + t[2]]
    print(f"seed {seed}: (where, model calls, kills) {tries}")
    assert len(tries) >= TASKS * KILL_ROUNDS // 2, (seed, tries)
    assert not over, f"seed {seed}: more than {TURNS} + kills model calls: {over}"
