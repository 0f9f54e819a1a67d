"""A task that ended on an error reads `failed` everywhere a caller looks: a real `mail server`
whose swarm's model is an OpenAI model with no OPENAI_API_KEY in the server's environment (a
real missing provider key: the model is never reached), a real webhook receiver process, a
peer swarm where nothing listens.

`POST /message`'s answer, `GET /task`, `GET /tasks` and the `task.failed` webhook say
`failed`; a streamed task carries a `task_error` event before the closing `task_complete`
that v1.3 clients wait for; one message that cannot reach another swarm is one
`interswarm.peer_unreachable`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.webhook_receiver import ReceiverProcess

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
)
from support.llm_thread import ThreadedLLM, mentions
from support.scripted_llm import reply, text, tool_call

pytestmark = pytest.mark.timeout(240)

SWARM = "keyless"
WEBHOOKS = """
[server.webhooks]
allowed_hosts = ["127.0.0.1"]
retry_schedule = [0.2, 0.2]
poll_interval = 0.2
"""


def _swarms_json(llm_url: str) -> list[dict[str, Any]]:
    # The supervisor has no api_key and no api_base: it needs OPENAI_API_KEY, which the
    # server lacks. `relay` is answered by the scripted model.
    keyless = {"llm": "openai/gpt-4o-mini", "use_proxy": False, "system": "You help."}
    scripted = {**keyless, "api_base": llm_url, "api_key": "test-key"}
    factory = "python::mail.factories.supervisor:LiteLLMSupervisorFunction"
    common = {
        "factory": factory,
        "enable_entrypoint": True,
        "enable_interswarm": True,
        "can_complete_tasks": True,
        "tool_format": "completions",
        "actions": [],
    }
    return [
        {
            "name": SWARM,
            "version": "1.3.6",
            "entrypoint": "supervisor",
            "enable_interswarm": True,
            "agents": [
                {"name": "supervisor", "comm_targets": [], "agent_params": keyless, **common},
                {
                    "name": "relay",
                    "comm_targets": ["supervisor@ghost"],
                    "agent_params": scripted,
                    **common,
                },
            ],
            "actions": [],
        }
    ]


class Setup:
    def __init__(self, server: ServerProcess, receiver: ReceiverProcess, key: str) -> None:
        self.server, self.receiver, self.key = server, receiver, key
        self.hook_id = ""

    def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        kwargs.setdefault("timeout", 60)
        headers = {**auth(self.key), **(headers or {})}
        return httpx.request(method, self.server.base_url + path, headers=headers, **kwargs)

    def hooks(self, event_type: str, task_id: str, path: str = "/hooks") -> list[dict[str, Any]]:
        return [
            p["data"]
            for p in (ReceiverProcess.payload(e) for e in self.receiver.received(path))
            if p["type"] == event_type and p["data"]["task_id"] == task_id
        ]

    def wait_hooks(self, event_type: str, task_id: str) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 30
        while not (found := self.hooks(event_type, task_id)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return found


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch_module: pytest.MonkeyPatch,
    llm: ThreadedLLM,
) -> Iterator[Setup]:
    # The server's environment is this process's: no key for the swarm's provider.
    monkeypatch_module.delenv("OPENAI_API_KEY", raising=False)
    root = tmp_path_factory.mktemp("failed_tasks")
    (root / "swarms.json").write_text(json.dumps(_swarms_json(llm.base_url)), encoding="utf-8")
    registry = root / "registries" / f"{SWARM}.json"
    registry.parent.mkdir(parents=True)
    registry.write_text(
        json.dumps(
            {
                "local_swarm_name": SWARM,
                "local_base_url": "http://127.0.0.1",
                "endpoints": {
                    "ghost": {"base_url": f"http://127.0.0.1:{free_port()}", "is_active": True}
                },
            }
        ),
        encoding="utf-8",
    )
    port = free_port()
    config = write_config(
        root, port=port, swarm=SWARM, extra="interswarm_timeout = 5.0\n" + WEBHOOKS
    )
    key = create_key(root / "registries" / "keys.json", "user", "alice")
    receiver = ReceiverProcess(free_port(), root).start()
    server = ServerProcess(root, port, args=["--config", str(config)]).start()
    try:
        made = Setup(server, receiver, key)
        r = made.call("POST", "/webhooks", json={"url": receiver.url("/hooks"), "events": ["*"]})
        assert r.status_code == 201, r.text
        receiver.secrets("/hooks", r.json()["secret"])
        made.hook_id = r.json()["id"]
        yield made
    finally:
        server.stop()
        receiver.stop()


@pytest.fixture(scope="module")
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_a_task_whose_model_cannot_be_called_reads_failed_everywhere(setup: Setup) -> None:
    key = {"Idempotency-Key": f'"failed-{uuid.uuid4().hex}"'}
    r = setup.call("POST", "/message", json={"body": "hello"}, headers=key)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert "OPENAI_API_KEY is not set" in answer["response"], answer
    assert answer["state"] == "failed", answer
    task_id = answer["task_id"]
    # A repeat (answered from the task's events) says the same, byte for byte.
    again = setup.call("POST", "/message", json={"body": "hello"}, headers=key)
    assert again.content == r.content, (again.content, r.content)

    record = setup.call("GET", "/task", params={"task_id": task_id}).json()
    assert record["state"] == "failed", record
    assert record["completed"] is True and record["is_running"] is False
    errors = [e for e in record["events"] if e["event"] == "task_error"]
    assert len(errors) == 1 and "OPENAI_API_KEY" in str(errors[0]["data"]), errors
    assert "missing_api_key" in str(errors[0]["data"]), errors

    summary = setup.call("GET", "/tasks").json()[task_id]
    assert summary["state"] == "failed", summary

    (failed,) = setup.wait_hooks("task.failed", task_id)
    assert failed["state"] == "failed", failed
    assert "OPENAI_API_KEY" in failed["summary"], failed
    assert setup.hooks("task.completed", task_id) == []


def test_a_failed_streamed_task_sends_task_error_before_task_complete(setup: Setup) -> None:
    with httpx.stream(
        "POST",
        setup.server.base_url + "/message",
        headers=auth(setup.key),
        json={"body": "hello again", "stream": True},
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        events = [e for e in parse_sse_stream(response) if e.event != "ping"]
    names = [e.event for e in events]
    assert "task_error" in names, names
    assert names[-1] == "task_complete", names  # what v1.3 clients wait for
    assert names.index("task_error") < len(names) - 1
    error = events[names.index("task_error")]
    assert error.id is not None and "OPENAI_API_KEY" in error.data, error


def test_one_message_that_cannot_reach_a_peer_is_one_peer_unreachable(
    setup: Setup, llm: ThreadedLLM
) -> None:
    token = f"ghost-{uuid.uuid4().hex[:8]}"
    ask = {"target": "supervisor@ghost", "subject": "hi", "body": f"anyone? {token}"}
    llm.queue(reply(tool_call("send_request", ask)), match=lambda r: mentions(r, token))
    llm.queue(
        reply(tool_call("task_complete", {"finish_message": f"nobody {token}"})),
        match=lambda r: mentions(r, token) and "::interswarm_error::" in str(r.body),
    )
    r = setup.call("POST", "/message", json={"body": token, "entrypoint": "relay"})
    assert r.status_code == 200, r.text
    assert r.json()["response"] == f"nobody {token}", r.text
    task_id = r.json()["task_id"]
    assert setup.wait_hooks("task.completed", task_id), setup.receiver.received("/hooks")
    # The end of the task is not news to a swarm that never got its message: nothing more
    # is sent there (a notice that failed too was a second peer_unreachable).
    record = setup.call("GET", "/task", params={"task_id": task_id}).json()
    assert record["remote_swarms"] == [], record["remote_swarms"]
    errors = [e for e in record["events"] if e["event"] == "interswarm_message_error"]
    assert len(errors) == 1, errors
    r = setup.call("GET", f"/webhooks/{setup.hook_id}/deliveries", params={"limit": 1000})
    assert r.status_code == 200, r.text
    kinds = [d["event_type"] for d in r.json()["deliveries"] if d["task_id"] == task_id]
    assert kinds.count("interswarm.peer_unreachable") == 1, kinds


def test_a_model_that_only_answers_in_text_ends_failed_within_max_steps(
    setup: Setup, llm: ThreadedLLM
) -> None:
    """Each plain-text answer is refused with a notice the model sees, counted toward
    max_steps; the third in a row (task_no_tool_call_limit) ends the task failed."""
    token = f"chatty-{uuid.uuid4().hex[:8]}"
    for n in range(20):  # far more than the task may use
        llm.queue(
            reply(text(f"Sure, I can help with {token} ({n}).")), match=lambda r: mentions(r, token)
        )
    started = time.monotonic()
    r = setup.call(
        "POST",
        "/message",
        # 4: the answer limit (3) is reached before the step limit's forced last call
        json={"body": token, "entrypoint": "relay", "kwargs": {"max_steps": 4}},
    )
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["state"] == "failed", answer
    assert "without a valid tool call" in answer["response"], answer
    assert "task_no_tool_call_limit" in answer["response"], answer
    calls = llm.requests(token)
    assert len(calls) == 3, len(calls)  # <= max_steps: the default task_no_tool_call_limit
    # Each call after the first showed the model why its answer was refused.
    assert all("::tool_call_error::" in str(c.body) for c in calls[1:]), calls
    record = setup.call("GET", "/task", params={"task_id": answer["task_id"]}).json()
    assert record["state"] == "failed", record
    (error,) = [e for e in record["events"] if e["event"] == "task_error"]
    assert "no_tool_call" in str(error["data"]), error
    usage = record["usage"]
    assert usage["model_calls"] == len(calls), usage
    print(
        f"text-only model, max_steps 3: {len(calls)} model calls, "
        f"{usage['total_tokens']} tokens, {elapsed:.2f} s"
    )
