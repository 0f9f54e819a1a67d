"""An action's step id (`mail.current_step_id`): "<task_id>:<tool_call_id>" of the call it
runs for, and the same id again when a kill -9 cut the action short and the restarted server
runs it again (the model's answer was stored before the action ran, so the model is not asked
again), on the default SQLite file and on PostgreSQL.

A LiteLLM supervisor answered by the scripted model server calls the action `lookup`, which
appends its step id to a file and then hangs on its first run of a step; the test kills the
server while it hangs and starts another on the same database. In the second test the same
answer also asks an agent of another swarm (a scripted peer), whose answer comes back while
the action hangs: the re-run takes only what the interrupted turn took (the answer gets a
turn of its own), acts on the kept answer, and sends the question again under the same
message id, so the peer can keep one copy.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.restarted_alpha import FakePeer, answer_envelope
from tests.support.store_backends import DurableStore, durable_store  # noqa: F401 - fixture
from tests.test_durable_random_kill import _counted_swarm, _post, _record
from tests.test_persistence_e2e import database  # noqa: F401 - the fixture

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.llm_thread import ThreadedLLM
from support.scripted_llm import reply, tool_call

pytestmark = pytest.mark.timeout(120)


def _step_log_swarm(
    directory: Path, swarm: str, port: int, api_base: str, ask_beta: bool = False
) -> Path:
    """The counted swarm whose `lookup` is `step_log_action` (with `hang`); with `ask_beta`
    its supervisor may also ask supervisor@swarm-beta. Returns the server's config."""
    definition = _counted_swarm(swarm, api_base)
    if ask_beta:
        definition[0]["enable_interswarm"] = True
        supervisor: dict[str, Any] = definition[0]["agents"][0]  # type: ignore[index]
        supervisor["comm_targets"] = ["supervisor@swarm-beta", "worker"]
        supervisor["enable_interswarm"] = True
    action: dict[str, Any] = definition[0]["actions"][0]  # type: ignore[index]
    action["function"] = "python::tests.support.scripted_agents:step_log_action"
    action["parameters"]["properties"]["hang"] = {"type": "boolean"}
    (directory / "swarms.json").write_text(json.dumps(definition), encoding="utf-8")
    return write_config(directory, port=port, swarm=swarm)


def _kill_and_finish(
    first: ServerProcess,
    server: Callable[[], ServerProcess],
    post: threading.Thread,
    key: str,
    task_id: str,
) -> dict[str, Any]:
    """Kill -9 `first`, start another on the same database: the task's record once it ends."""
    assert first.proc is not None
    first.proc.kill()
    first.proc.wait(10)
    post.join()
    second = server()
    try:
        deadline = time.monotonic() + 30
        while not (record := _record(second, key, task_id)) or not record["completed"]:
            assert time.monotonic() < deadline, (record, second.logs())
            time.sleep(0.05)
    finally:
        assert second.stop() == 0, second.logs()
    return record


def _reply(request: Any) -> Any:
    """Look up once (an action that hangs on its first run), then complete."""
    conversation = json.dumps(request.messages)
    if "logged " not in conversation:
        return reply(tool_call("lookup", {"query": "q", "hang": True}))
    return reply(tool_call("task_complete", {"finish_message": "looked it up"}))


def test_an_action_re_run_after_a_kill_sees_the_same_step_id(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    swarm = f"steps-{uuid.uuid4().hex[:8]}"
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    log = tmp_path / "steps.log"
    env = {**durable_store.env, "MAIL_TEST_STEP_LOG": str(log)}
    task_id, token = str(uuid.uuid4()), f"RUN-{uuid.uuid4().hex[:12]}"
    with ThreadedLLM() as llm:
        for _ in range(6):
            llm.queue(_reply)
        config = _step_log_swarm(tmp_path, swarm, port, llm.base_url)

        def server() -> ServerProcess:
            return ServerProcess(tmp_path, port, args=["--config", str(config)], env=env).start()

        first = server()
        post = threading.Thread(target=_post, args=(first.base_url, key, task_id, token, 0))
        post.start()
        deadline = time.monotonic() + 30
        while not log.exists() or not log.read_text(encoding="utf-8").strip():
            assert time.monotonic() < deadline, first.logs()
            time.sleep(0.02)
        record = _kill_and_finish(first, server, post, key, task_id)  # while the action hangs
        calls = len(llm.requests(token))
    steps = log.read_text(encoding="utf-8").splitlines()
    assert len(steps) == 2 and steps[0] == steps[1], steps
    assert re.fullmatch(rf"{task_id}:call_[0-9a-f]{{12}}", steps[0]), steps
    call_id = steps[0].split(":", 1)[1]
    tool_calls = [e["data"] for e in record["events"] if e["event"] == "tool_call"]
    assert any(call_id in data for data in tool_calls), tool_calls
    assert any("looked it up" in e["data"] for e in record["events"]), record["events"]
    assert calls == 2, calls  # the lookup answer was not asked for again


def _ask_beta_and_look_up(request: Any) -> Any:
    """Ask supervisor@swarm-beta and look up (hanging on the first run) in one answer."""
    conversation = json.dumps(request.messages)
    if "logged " not in conversation:
        question = {"target": "supervisor@swarm-beta", "subject": "q", "body": "what is up"}
        return reply(
            tool_call("send_request", question), tool_call("lookup", {"query": "q", "hang": True})
        )
    return reply(tool_call("task_complete", {"finish_message": "asked and looked up"}))


def test_a_message_to_another_swarm_re_sent_by_a_re_run_keeps_its_id(
    durable_store: DurableStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    swarm = "swarm-alpha"
    keys = tmp_path / "registries" / "keys.json"
    alice, admin = create_key(keys, "user", "alice"), create_key(keys, "admin", "root")
    beta = create_key(keys, "agent", "swarm-beta")
    port = free_port()
    log = tmp_path / "steps.log"
    env = {
        **durable_store.env,
        "MAIL_TEST_STEP_LOG": str(log),
        "SWARM_AUTH_TOKEN_SWARM_BETA": "beta-token",
    }
    task_id, token = str(uuid.uuid4()), f"RUN-{uuid.uuid4().hex[:12]}"
    peer = FakePeer("swarm-beta")
    with ThreadedLLM() as llm:
        for _ in range(6):
            llm.queue(_ask_beta_and_look_up)
        config = _step_log_swarm(tmp_path, swarm, port, llm.base_url, ask_beta=True)

        def server() -> ServerProcess:
            return ServerProcess(tmp_path, port, args=["--config", str(config)], env=env).start()

        def forwards() -> list[dict[str, Any]]:
            return [r["envelope"] for r in peer.received if r["path"] == "/interswarm/forward"]

        first = server()
        try:
            r = httpx.post(
                f"{first.base_url}/swarms",
                json={"name": "swarm-beta", "base_url": peer.url, "volatile": False},
                headers=auth(admin),
                timeout=30,
            )
            assert r.status_code == 200, r.text
            post = threading.Thread(target=_post, args=(first.base_url, alice, task_id, token, 0))
            post.start()
            deadline = time.monotonic() + 30
            while not forwards() or not log.exists() or not log.read_text().strip():
                assert time.monotonic() < deadline, (peer.received, first.logs())
                time.sleep(0.02)
            # beta answers while the step is in flight: stored (200), for the agent's next turn
            back = httpx.post(
                f"{first.base_url}/interswarm/back",
                json={"message": answer_envelope(forwards()[0], "forty-two")},
                headers=auth(beta),
                timeout=30,
            )
            assert back.status_code == 200, back.text
            _kill_and_finish(first, server, post, alice, task_id)  # the step is in flight
        finally:
            first.stop()
            peer.close()
        calls = len(llm.requests(token))
    sent = forwards()
    asked = [e for e in sent if e["payload"]["subject"] == "q"]
    assert len(asked) == 2, sent  # sent again by the re-run of the step...
    assert asked[0]["message_id"] == asked[1]["message_id"], asked  # ...as the same message
    assert asked[0]["payload"] == asked[1]["payload"], asked
    steps = log.read_text(encoding="utf-8").splitlines()
    assert len(steps) == 2 and steps[0] == steps[1], steps
    assert calls == 2, calls  # the answer was not asked for again


@pytest.mark.parametrize("deployment_key", [False, True], ids=["callers-key", "proxy-key"])
def test_agents_that_use_the_callers_key_continue_at_the_callers_next_request(
    tmp_path: Path, deployment_key: bool
) -> None:
    """Agents that call the LiteLLM proxy with the caller's API key (`use_proxy`, no key of
    the deployment's) cannot continue a task at start-up: the key is not kept. The restarted
    server says so and leaves the task to the caller's next request, which brings the key:
    every model call carries it, none an empty one. With LITELLM_PROXY_API_KEY set the task
    continues by itself, its calls after the restart carrying that key."""
    swarm = f"proxy-{uuid.uuid4().hex[:8]}"
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    port = free_port()
    log = tmp_path / "steps.log"
    task_id, token = str(uuid.uuid4()), f"RUN-{uuid.uuid4().hex[:12]}"
    with ThreadedLLM() as llm:
        for _ in range(6):
            llm.queue(_reply)
        config = _step_log_swarm(tmp_path, swarm, port, llm.base_url)
        definition = json.loads((tmp_path / "swarms.json").read_text(encoding="utf-8"))
        for agent in definition[0]["agents"]:  # through the proxy, with the caller's key
            params = agent["agent_params"]
            del params["api_base"], params["api_key"]
            params["use_proxy"] = True
        (tmp_path / "swarms.json").write_text(json.dumps(definition), encoding="utf-8")
        env = {"MAIL_TEST_STEP_LOG": str(log), "LITELLM_PROXY_API_BASE": llm.base_url}
        if deployment_key:
            env["LITELLM_PROXY_API_KEY"] = "proxy-key"

        def server() -> ServerProcess:
            return ServerProcess(tmp_path, port, args=["--config", str(config)], env=env).start()

        first = server()
        post = threading.Thread(target=_post, args=(first.base_url, key, task_id, token, 0))
        post.start()
        deadline = time.monotonic() + 30
        while not log.exists() or not log.read_text(encoding="utf-8").strip():
            assert time.monotonic() < deadline, first.logs()
            time.sleep(0.02)
        assert first.proc is not None
        first.proc.kill()  # while the action hangs
        first.proc.wait(10)
        post.join()
        second = server()
        try:
            deadline = time.monotonic() + 30
            said = "continuing the running tasks of" if deployment_key else "next request"
            while said not in second.logs():
                assert time.monotonic() < deadline, second.logs()
                time.sleep(0.05)
            if not deployment_key:  # not continued before the caller's request
                assert len(log.read_text(encoding="utf-8").splitlines()) == 1
            while not (record := _record(second, key, task_id)) or not record["completed"]:
                assert time.monotonic() < deadline, (record, second.logs())
                time.sleep(0.05)
        finally:
            assert second.stop() == 0, second.logs()
        sent = [
            next((v for k, v in r.headers.items() if k.lower() == "authorization"), None)
            for r in llm.requests(token)
        ]
    assert "looked it up" in json.dumps(record["events"]), record
    after = "Bearer proxy-key" if deployment_key else f"Bearer {key}"
    assert sent == [f"Bearer {key}", after], sent
