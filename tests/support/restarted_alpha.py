"""swarm-alpha on a PostgreSQL schema, killed -9 and started again on the same port, beside
a scripted peer ``swarm-beta`` (an HTTP server that takes alpha's forwards and answers 200,
so alpha's task waits for the peer's answer, which the test then sends as beta's router
would), with a model-call log (one line per agent call, in a file, so calls are counted
across a kill -9). For the interswarm retry tests (``test_idempotency_interswarm_*``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from tests.support.counted_agents import CALLS_ENV
from tests.support.interswarm_agents import swarm_json
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

TAKEOVER = "idempotency_takeover_after = 3\n"
# The owner's instance stays unloaded after a restart until the owner's next request (as for a
# caller past the start-up resume's bound), so peers' answers are kept for it meanwhile.
NOT_RESUMED = "resume_instances_at_start = 0\n"


def alpha_swarms(name: str = "swarm-alpha", remote: str = "swarm-beta") -> list[dict[str, Any]]:
    swarms = swarm_json(name, remote)
    for agent in swarms[0]["agents"]:
        if agent["name"] == "supervisor":
            agent["factory"] = "python::tests.support.counted_agents:counted_supervisor"
    return swarms


class FakePeer:
    """``swarm-beta`` as alpha's router sees it: ``GET /`` names it, ``POST
    /interswarm/forward`` and ``/back`` are taken (200) and kept in `received`."""

    def __init__(self, name: str = "swarm-beta") -> None:
        self.name = name
        self.received: list[dict[str, Any]] = []
        info = json.dumps({"protocol_version": "1.3", "swarm": {"name": name, "public": True}})
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                self._reply(info.encode())

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                data = json.loads(self.rfile.read(length) or b"{}")
                envelope = data.get("message") or {}
                peer.received.append({"path": self.path, "envelope": envelope})
                task_id = (envelope.get("payload") or {}).get("task_id")
                answer = {"swarm": name, "task_id": task_id, "status": "success"}
                self._reply(json.dumps(answer).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def wait_for(self, count: int, timeout: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            assert time.monotonic() < deadline, self.received
            time.sleep(0.05)
        return self.received


class Alpha:
    """swarm-alpha (alice's, PostgreSQL; with no `url`, the default SQLite file in
    `directory`), restarted on the same port after a kill -9. `settings`: more lines of its
    ``[server.settings]``."""

    def __init__(
        self, directory: Path, url: str | None, peer: FakePeer, settings: str = ""
    ) -> None:
        self.settings = settings
        (directory / "swarms.json").write_text(json.dumps(alpha_swarms()), encoding="utf-8")
        keys = directory / "registries" / "keys.json"
        self.keys = {
            "alice": create_key(keys, "user", "alice"),
            "admin": create_key(keys, "admin", "root"),
            "beta": create_key(keys, "agent", "swarm-beta"),
        }
        self.directory, self.url, self.peer = directory, url, peer
        self.calls = directory / "calls.log"
        self.port = free_port()
        self.server = self.start()
        r = httpx.post(
            f"{self.server.base_url}/swarms",
            json={"name": peer.name, "base_url": peer.url, "volatile": False},
            headers=auth(self.keys["admin"]),
            timeout=30,
        )
        assert r.status_code == 200, r.text

    def start(self) -> ServerProcess:
        config = write_config(
            self.directory, port=self.port, swarm="swarm-alpha", extra=TAKEOVER + self.settings
        )
        env = {"SWARM_AUTH_TOKEN_SWARM_BETA": "beta-token", CALLS_ENV: str(self.calls)}
        if self.url is not None:
            env["DATABASE_URL"] = self.url
        return ServerProcess(
            self.directory, self.port, args=["--config", str(config)], env=env
        ).start()

    def kill_and_restart(self) -> None:
        assert self.server.proc is not None
        self.server.proc.kill()
        self.server.proc.wait(10)
        self.server = self.start()

    def call_log(self) -> list[dict[str, Any]]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text().splitlines() if line]

    def calls_with(self, text: str) -> int:
        return sum(1 for c in self.call_log() if text in c["last"])

    def get(self, who: str, path: str) -> httpx.Response:
        return httpx.get(f"{self.server.base_url}{path}", headers=auth(self.keys[who]), timeout=60)


def post_in_background(
    url: str, body: Any, headers: dict[str, str]
) -> tuple[list[Any], threading.Thread]:
    """A request left running in a thread (cut by a kill -9 later): its answer or error."""
    answers: list[Any] = []

    def run() -> None:
        try:
            answers.append(httpx.post(url, json=body, headers=headers, timeout=120))
        except httpx.HTTPError as exc:
            answers.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return answers, thread


@contextlib.contextmanager
def background_post(url: str, body: Any, headers: dict[str, str]) -> Iterator[list[Any]]:
    """`post_in_background`, joined (30 s at most) when the block ends."""
    answers, thread = post_in_background(url, body, headers)
    try:
        yield answers
    finally:
        thread.join(30)


def answer_envelope(question: dict[str, Any], body: str, **payload: Any) -> dict[str, Any]:
    """swarm-beta's answer to alpha's `question` envelope (as beta's router wraps it)."""
    asked = question["payload"]
    return {
        "message_id": str(uuid.uuid4()),
        "source_swarm": "swarm-beta",
        "target_swarm": "swarm-alpha",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "payload": {
            "task_id": asked["task_id"],
            "request_id": str(uuid.uuid4()),
            "sender": {"address_type": "agent", "address": "supervisor@swarm-beta"},
            "recipient": asked["sender"],
            "subject": "answer",
            "body": body,
            "sender_swarm": "swarm-beta",
            "recipient_swarm": "swarm-alpha",
            "routing_info": {},
            **payload,
        },
        "msg_type": "response",
        "auth_token": "x",
        "task_owner": question["task_owner"],
        "task_contributors": list(question["task_contributors"]),
        "metadata": {},
    }


@contextlib.contextmanager
def alpha_beside_peer(directory: Path, schema_prefix: str) -> Iterator[Alpha]:
    """`Alpha` on a scratch PostgreSQL schema of its own beside a `FakePeer`, both stopped
    (and the schema dropped) on exit."""
    peer = FakePeer()
    with scratch_schema(schema_prefix, BASE_URL) as schema:
        made = Alpha(directory, with_search_path(BASE_URL, schema), peer)
        try:
            yield made
        finally:
            made.server.stop()
            peer.close()


@contextlib.contextmanager
def alpha_on_sqlite(directory: Path, settings: str = "") -> Iterator[Alpha]:
    """`Alpha` on the default SQLite file in `directory` (as `mail server` keeps it) beside a
    `FakePeer`, both stopped on exit; `settings`: more ``[server.settings]`` lines."""
    peer = FakePeer()
    made = Alpha(directory, None, peer, settings=settings)
    try:
        yield made
    finally:
        made.server.stop()
        peer.close()
