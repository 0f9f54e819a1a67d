"""A hostile peer cannot make a real `mail server` hold its answers in memory: an interswarm
POST answered with a huge 400 body (whose text POST /interswarm/message passes on) and a
`/health` answer of hundreds of megabytes are read only up to a small cap. The peak RSS of the
server process (VmHWM) is measured around each."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.interswarm_agents import swarm_json

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

pytestmark = pytest.mark.timeout(180)

HUGE = 200 * 1024 * 1024  # bytes each hostile answer claims and sends
BOUND_KIB = 40 * 1024  # allowed growth of the server's peak RSS per abusive answer


class _EvilPeer:
    """Answers like a MAIL server named `swarm-evil`, until told to answer huge bodies."""

    def __init__(self) -> None:
        self.huge_health = False
        self.health_hits = 0
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _small(self, status: int, data: dict[str, Any]) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _huge(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(HUGE))
                self.end_headers()
                chunk = b"x" * (1024 * 1024)
                try:
                    for _ in range(HUGE // len(chunk)):
                        self.wfile.write(chunk)
                except OSError:
                    pass  # the reader stopped early: what we want

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/") == "/health":
                    peer.health_hits += 1
                    if peer.huge_health:
                        return self._huge(200)
                    return self._small(200, {"status": "healthy", "swarm_name": "swarm-evil"})
                return self._small(
                    200,
                    {
                        "name": "mail",
                        "protocol_version": "1.3",
                        "swarm": {"name": "swarm-evil", "public": True},
                    },
                )

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._huge(400)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture
def alpha_and_evil(tmp_path: Path) -> Iterator[tuple[ServerProcess, _EvilPeer, dict[str, str]]]:
    peer = _EvilPeer()
    thread = threading.Thread(target=peer.httpd.serve_forever, daemon=True)
    thread.start()
    (tmp_path / "swarms.json").write_text(json.dumps(swarm_json("swarm-alpha", "swarm-evil")))
    port = free_port()
    config = write_config(
        tmp_path,
        port=port,
        swarm="swarm-alpha",
        extra="interswarm_timeout = 20.0\nhealth_check_interval = 0.5\n",
    )
    keys_file = tmp_path / "registries" / "keys.json"
    keys = {
        "admin": create_key(keys_file, "admin", "root"),
        "alice": create_key(keys_file, "user", "alice"),
    }
    server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start()
    try:
        r = httpx.post(
            f"{server.base_url}/swarms",
            json={"name": "swarm-evil", "base_url": peer.url, "volatile": True, "auth_token": "t"},
            headers=auth(keys["admin"]),
            timeout=20,
        )
        assert r.status_code == 200, r.text
        yield server, peer, keys
    finally:
        server.stop()
        peer.httpd.shutdown()
        peer.httpd.server_close()


def test_huge_peer_refusal_is_read_only_up_to_a_cap(alpha_and_evil) -> None:
    server, _peer, keys = alpha_and_evil
    assert server.proc is not None
    before = _peak_kib(server.proc.pid)
    r = httpx.post(
        f"{server.base_url}/interswarm/message",
        json={"targets": ["supervisor@swarm-evil"], "body": "hi", "msg_type": "request"},
        headers=auth(keys["alice"]),
        timeout=120,
    )
    grown = _peak_kib(server.proc.pid) - before
    # The peer's refusal still reaches the caller as a 400, its text cut to a short excerpt.
    assert r.status_code == 400, r.text[:500]
    assert len(r.content) < 64 * 1024
    assert grown < BOUND_KIB, f"peak RSS grew by {grown} KiB"


def test_huge_health_answer_is_read_only_up_to_a_cap(alpha_and_evil) -> None:
    server, peer, _keys = alpha_and_evil
    assert server.proc is not None
    before = _peak_kib(server.proc.pid)
    peer.huge_health = True
    hits = peer.health_hits
    deadline = time.monotonic() + 60
    while peer.health_hits < hits + 3:
        assert time.monotonic() < deadline, "no health checks reached the peer"
        time.sleep(0.1)
    time.sleep(0.5)  # let the last check finish reading
    grown = _peak_kib(server.proc.pid) - before
    assert grown < BOUND_KIB, f"peak RSS grew by {grown} KiB"
