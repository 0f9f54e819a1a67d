"""discover_swarms behind the address guard and scoped to one instance; per-agent tool
rights; no task idles after an error result. Real `mail server` processes (LiteLLM agents
on the scripted model) and a tiny loopback HTTP peer that counts what reaches it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.scripted_llm import ScriptedLLM, ScriptedRequest, reply, tool_call

pytestmark = pytest.mark.timeout(300)

LISTED_SECRET = "LISTED-SECRET-TOKEN"
ANSWER_TIMEOUT = 120.0  # a loaded machine; an idle task would wait for the message timeout


# ------------------------------------------------------------------ the loopback peer
class FakePeer:
    """A loopback HTTP server posing as a MAIL server; records every request."""

    def __init__(self, identity: str = "known") -> None:
        self.identity = identity
        self.requests: list[tuple[str, str, dict[str, str], str]] = []
        self.listed: list[dict[str, Any]] = []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, doc: Any) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                peer.requests.append((self.command, self.path, dict(self.headers), body))

            def do_GET(self) -> None:  # noqa: N802
                self._record()
                if self.path == "/":
                    swarm = {"name": peer.identity, "entrypoint": "supervisor", "public": True}
                    self._answer(200, {"name": "mail", "status": "running", "swarm": swarm})
                elif self.path == "/health":
                    self._answer(200, {"status": "ok", "swarm_name": peer.identity})
                elif self.path == "/swarms":
                    self._answer(200, {"swarms": peer.listed})
                else:
                    self._answer(404, {"detail": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                self._record()
                self._answer(401, {"detail": "no valid token"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def hits(self, *, excluding: tuple[str, ...] = ("/", "/health")) -> list[tuple[str, str]]:
        """(method, path) of the requests, without registration and health checks."""
        return [(m, p) for m, p, _, _ in self.requests if p not in excluding]

    def __enter__(self) -> FakePeer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def peer() -> Iterator[FakePeer]:
    with FakePeer() as fake:
        yield fake


# ------------------------------------------------------------------ servers and the model
def _agent(
    name: str, targets: list[str], llm_url: str, style: str = "completions", **extra: Any
) -> dict[str, Any]:
    factory = "python::mail.factories.base:LiteLLMAgentFunction"
    if extra.get("can_complete_tasks"):
        factory = "python::mail.factories.supervisor:LiteLLMSupervisorFunction"
    params = {"llm": "openai/gpt-4o-mini", "use_proxy": False, "api_base": llm_url}
    return {
        "name": name,
        "factory": factory,
        "comm_targets": targets,
        "agent_params": {**params, "api_key": "test-key", "system": f"ROLE={name}"},
        "tool_format": style,
        **extra,
    }


def _swarms(llm_url: str, style: str = "completions") -> list[dict[str, Any]]:
    return [
        {
            "name": "swarm-alpha",
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "enable_interswarm": True,
            "agents": [
                _agent(
                    "supervisor",
                    ["worker"],
                    llm_url,
                    style,
                    enable_entrypoint=True,
                    can_complete_tasks=True,
                    enable_interswarm=True,
                    team_tools=["inbox"],
                ),
                _agent("worker", ["supervisor"], llm_url, style),
            ],
            "actions": [],
        }
    ]


def _start(
    directory: Path, llm: ScriptedLLM, env: dict[str, str] | None = None, style: str = "completions"
) -> ServerProcess:
    directory.mkdir(parents=True, exist_ok=True)
    swarms = _swarms(llm.base_url, style)
    (directory / "swarms.json").write_text(json.dumps(swarms), encoding="utf-8")
    keys_file = directory / "registries" / "keys.json"
    keys = {
        name: create_key(keys_file, role, name)
        for name, role in (("root", "admin"), ("alice", "user"), ("bob", "user"))
    }
    port = free_port()
    config = write_config(directory, port=port, swarm="swarm-alpha")
    server = ServerProcess(directory, port, args=["--config", str(config)], env=env or {})
    server.keys = keys
    return server.start()


def _restart(server: ServerProcess) -> ServerProcess:
    assert server.stop() == 0, server.logs()
    again = ServerProcess(server.directory, server.port, args=server.args, env=server.env)
    again.keys = server.keys
    return again.start()


def _role(name: str) -> Any:
    return lambda request: f"ROLE={name}" in request.system_text


def _seen(request: ScriptedRequest) -> str:
    """Every tool result and incoming message the model was shown, as one text (both the
    Chat Completions and the Responses layout)."""
    parts = []
    for m in request.messages:
        if m.get("role") in ("tool", "user"):
            parts.append(str(m.get("content")))
        elif m.get("type") == "function_call_output":
            parts.append(str(m.get("output")))
    return "\n".join(parts)


def _complete_with_what_was_seen(request: ScriptedRequest) -> Any:
    return reply(tool_call("task_complete", {"finish_message": _seen(request)}))


async def _ask(server: ServerProcess, who: str, body: str) -> tuple[str, float]:
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=ANSWER_TIMEOUT) as client:
        response = await client.post(
            f"{server.base_url}/message", json={"body": body}, headers=auth(server.keys[who])
        )
    assert response.status_code == 200, response.text
    return response.json()["response"], time.monotonic() - started


# ------------------------------------------------------------------ the tests
async def test_discovery_refuses_paths_and_loopback_before_any_request(
    tmp_path: Path, peer: FakePeer
) -> None:
    peer.listed = [{"swarm_name": "found", "base_url": peer.base_url}]
    async with ScriptedLLM() as llm:
        server = _start(tmp_path / "srv", llm)
        try:
            llm.queue(
                tool_call("discover_swarms", {"discovery_urls": [f"{peer.base_url}/a/b?x=1"]}),
                tool_call("discover_swarms", {"discovery_urls": [peer.base_url]}),
                match=_role("supervisor"),
            )
            llm.queue(_complete_with_what_was_seen, match=_role("supervisor"))
            answer, took = await _ask(server, "alice", "find swarms")
        finally:
            server.stop()
    # No request of any kind reached the loopback peer: not the agent's path, not /swarms.
    assert peer.requests == []
    assert "without a path, query or fragment" in answer and "nothing was fetched" in answer
    assert "loopback addresses are blocked" in answer and "allowed_hosts" in answer
    # The error results earned the agent another turn: the task ended, it did not idle.
    assert took < ANSWER_TIMEOUT
    print(f"discovery refused, task answered in {took:.2f}s")


async def test_discovery_is_scoped_to_the_callers_instance_and_never_uses_listed_tokens(
    tmp_path: Path, peer: FakePeer
) -> None:
    # "known" is registered by the admin; the list tries to move it and to add "found".
    peer.listed = [
        {"swarm_name": "found", "base_url": peer.base_url, "auth_token": LISTED_SECRET},
        {"swarm_name": "known", "base_url": "http://127.0.0.1:9", "auth_token": LISTED_SECRET},
        {"swarm_name": "swarm-alpha", "base_url": "http://127.0.0.1:9"},
    ]
    broadcast = {"subject": "hi", "body": "hello", "target_swarms": ["found"]}
    # Models sometimes name one swarm as a string: it is that swarm, not its letters.
    broadcast_one = {**broadcast, "target_swarms": "found"}
    async with ScriptedLLM() as llm:
        server = _start(tmp_path / "srv", llm, env={"MAIL_STDLIB_NET_ALLOWED_HOSTS": "127.0.0.1"})
        try:
            registered = httpx.post(
                f"{server.base_url}/swarms",
                json={"name": "known", "base_url": peer.base_url, "volatile": False},
                headers=auth(server.keys["root"]),
                timeout=30,
            )
            assert registered.status_code == 200, registered.text
            before = httpx.get(f"{server.base_url}/swarms", timeout=10).json()

            # alice's agent discovers, then broadcasts to what it found.
            sup = _role("supervisor")
            llm.queue(tool_call("discover_swarms", {"discovery_urls": [peer.base_url]}), match=sup)
            llm.queue(tool_call("send_interswarm_broadcast", broadcast_one), match=sup)
            llm.queue(_complete_with_what_was_seen, match=sup)
            alice_answer, _ = await _ask(server, "alice", "discover and greet")
            posts = [r for r in peer.requests if r[0] == "POST"]

            # bob's instance never heard of "found".
            llm.queue(tool_call("send_interswarm_broadcast", broadcast), match=sup)
            llm.queue(_complete_with_what_was_seen, match=sup)
            bob_answer, _ = await _ask(server, "bob", "greet found")
            after = httpx.get(f"{server.base_url}/swarms", timeout=10).json()

            # A restart forgets it, also for alice.
            server = _restart(server)
            llm.queue(tool_call("send_interswarm_broadcast", broadcast), match=sup)
            llm.queue(_complete_with_what_was_seen, match=sup)
            restarted_answer, _ = await _ask(server, "alice", "greet found again")
        finally:
            server.stop()

    assert "discovered swarms" in alice_answer and f"found at {peer.base_url}" in alice_answer
    assert "'known' is already registered on this server" in alice_answer
    assert "'swarm-alpha' is this swarm" in alice_answer
    # The broadcast (and then the end-of-task notice) reached the discovered address,
    # without any credential.
    assert posts and {p for _, p, _, _ in posts} == {"/interswarm/forward"}
    assert "hello" in posts[0][3]
    for _, _, headers, body in posts:
        assert "authorization" not in {h.lower() for h in headers}
        assert LISTED_SECRET not in body and LISTED_SECRET not in json.dumps(headers)
    assert "answered HTTP 401" in alice_answer  # the peer's refusal came back to the agent

    assert "unknown swarm endpoint: 'found'" in bob_answer
    # Nothing of bob's (or of alice's after the restart) went to the discovered address.
    owners = [
        json.loads(body)["message"]["task_owner"] for m, _, _, body in peer.requests if m == "POST"
    ]
    assert owners and set(owners) == {"user:alice@swarm-alpha"}
    assert len(owners) <= 2  # the broadcast and the end-of-task notice of alice's one task
    assert "unknown swarm endpoint: 'found'" in restarted_answer

    # The server-wide registry never changed: no "found", "known" still where the admin put it.
    def entries(doc: dict[str, Any]) -> dict[str, str]:
        return {s["swarm_name"]: s["base_url"] for s in doc["swarms"]}

    assert entries(before) == entries(after)
    assert "found" not in entries(after) and entries(after)["known"] == peer.base_url
    saved = (tmp_path / "srv" / "registries" / "swarm-alpha.json").read_text()
    assert "found" not in json.loads(saved).get("swarms", saved)
    assert LISTED_SECRET not in saved


@pytest.mark.parametrize("style", ["completions", "responses"])
async def test_agents_cannot_call_tools_they_were_not_offered(
    tmp_path: Path, peer: FakePeer, style: str
) -> None:
    peer.listed = [{"swarm_name": "found", "base_url": peer.base_url}]
    env = {"MAIL_STDLIB_NET_ALLOWED_HOSTS": "127.0.0.1"}
    async with ScriptedLLM() as llm:
        server = _start(tmp_path / "srv", llm, env=env, style=style)
        try:
            sup, worker = _role("supervisor"), _role("worker")
            llm.queue(
                tool_call("send_request", {"target": "worker", "subject": "go", "body": "go"}),
                match=sup,
            )
            llm.queue(
                tool_call("discover_swarms", {"discovery_urls": [peer.base_url]}),
                tool_call(
                    "send_interswarm_broadcast",
                    {"subject": "s", "body": "b", "target_swarms": ["found"]},
                ),
                tool_call("send_interrupt", {"target": "supervisor", "subject": "s", "body": "b"}),
                tool_call("send_broadcast", {"subject": "s", "body": "b", "targets": ["all"]}),
                match=worker,
            )
            llm.queue(
                lambda r: reply(
                    tool_call(
                        "send_response",
                        {"target": "supervisor", "subject": "results", "body": _seen(r)},
                    )
                ),
                match=worker,
            )
            llm.queue(_complete_with_what_was_seen, match=sup)
            answer, _ = await _ask(server, "alice", "have the worker try")
        finally:
            server.stop()
    worker_requests = [r for r in llm.requests if "ROLE=worker" in r.system_text]
    offered = set(worker_requests[0].tool_names)
    for tool in (
        "discover_swarms",
        "send_interswarm_broadcast",
        "send_interrupt",
        "send_broadcast",
    ):
        assert tool not in offered
        assert f"ERROR: you may not call '{tool}'" in answer, answer
    assert "interswarm tools are offered only to supervisors with enable_interswarm" in answer
    assert "Tools you may call: " in answer
    assert peer.requests == []  # nothing the worker asked for left the server


async def test_an_error_result_gets_the_agent_another_turn(tmp_path: Path) -> None:
    async with ScriptedLLM() as llm:
        server = _start(tmp_path / "srv", llm)
        try:
            sup = _role("supervisor")
            llm.queue(
                tool_call("send_broadcast", {"subject": "s", "body": "b", "targets": ["zed"]}),
                match=sup,
            )
            llm.queue(_complete_with_what_was_seen, match=sup)
            answer, took = await _ask(server, "alice", "broadcast to zed")
        finally:
            server.stop()
    assert "ERROR: unknown broadcast targets: zed. Valid names: worker" in answer
    assert "::action_error::" in answer
    print(f"task with an error result answered in {took:.2f}s")


async def test_discovery_lists_are_read_with_the_http_actions_limits(
    tmp_path: Path, peer: FakePeer
) -> None:
    # One more entry than fits under a 2 KB cap: the list is refused, nothing is registered.
    peer.listed = [{"swarm_name": f"s{i}", "base_url": peer.base_url} for i in range(60)]
    env = {
        "MAIL_STDLIB_NET_ALLOWED_HOSTS": "127.0.0.1",
        "MAIL_STDLIB_HTTP_MAX_RESPONSE_BYTES": "2000",
    }
    async with ScriptedLLM() as llm:
        server = _start(tmp_path / "srv", llm, env=env)
        try:
            sup = _role("supervisor")
            llm.queue(tool_call("discover_swarms", {"discovery_urls": [peer.base_url]}), match=sup)
            llm.queue(_complete_with_what_was_seen, match=sup)
            answer, _ = await _ask(server, "alice", "discover")
        finally:
            server.stop()
    assert peer.hits() == [("GET", "/swarms")]
    assert "over the limit of 2000 bytes" in answer and "max_response_bytes" in answer
    assert "ERROR: no swarm was discovered" in answer


def test_fake_peer_counts_requests() -> None:
    """The counting peer itself: a request shows up, so `== []` above means none came."""
    with FakePeer() as fake:
        asyncio.run(_probe(fake.base_url))
        assert fake.hits() == [("GET", "/swarms")]


async def _probe(url: str) -> None:
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/swarms")).status_code == 200
