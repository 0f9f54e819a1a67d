"""Answers of a hostile remote swarm are counted while they are read (issue 26, part A).

A swarm registered with ``POST /swarms`` is asked for ``GET /`` (and later ``/health``,
``/swarms``, interswarm answers); its answer used to be read whole, decompressed: 150 MB of
gzipped JSON on ``GET /`` took the server from 71 to 546 MiB and was registered. Now the
answer is refused past the caps of ``mail.net.answers`` and the server's peak RSS stays within
``RSS_BOUND_MIB`` of where it was.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from mail.net.answers import MAX_PEER_INFO_BYTES
from server_fixtures import ServerProcess, auth, keyed_stub_server
from support.abuse_harness import MIB, Memory

pytestmark = pytest.mark.timeout(180)

RSS_BOUND_MIB = 30


def _big_info() -> bytes:
    info = b'{"swarm": {"name": "evil", "description": "' + b"d" * (150 * MIB) + b'"}}'
    return gzip.compress(info, compresslevel=9)


@pytest.fixture(scope="module")
def hostile_peer() -> Iterator[str]:
    body = _big_info()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # the agent server hanging up on the bomb is the expected outcome

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {"admin": ("admin", "root")}
    with keyed_stub_server(tmp_path_factory.mktemp("peers"), keys) as proc:
        yield proc


def test_a_huge_swarm_info_answer_is_refused_while_it_is_read(
    server: ServerProcess, hostile_peer: str
) -> None:
    assert server.proc is not None
    headers = auth(server.keys["admin"])
    memory = Memory(server.proc.pid).start()
    r = httpx.post(
        f"{server.base_url}/swarms",
        json={"name": "evil", "base_url": hostile_peer, "volatile": True},
        headers=headers,
        timeout=60,
    )
    memory.stop()
    print("GET / of 150 MB gzipped JSON: RSS before/peak/after MiB", memory.row())
    assert r.status_code == 500, r.text
    assert f"over {MAX_PEER_INFO_BYTES} bytes" in r.json()["detail"], r.text
    assert memory.growth < RSS_BOUND_MIB, memory.row()
    listed = httpx.get(f"{server.base_url}/swarms", headers=headers, timeout=30).json()
    assert "evil" not in json.dumps(listed)


@pytest.fixture(scope="module")
def surrogate_peer() -> Iterator[str]:
    """A peer whose JSON answers spell lone surrogates (``"\\ud800"``): escaped in its swarm
    info, raw bytes (ED A0 80, which Python's decoder keeps too) in its health answer."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/health"):
                body = b'{"status": "healthy", "swarm_name": "odd\xed\xa0\x80"}'
            else:
                body = (
                    b'{"swarm": {"name": "odd", "description": "bad \\ud800 text", '
                    b'"keywords": ["k\\udfff"]}, "protocol_version": "1.3"}'
                )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_peers_lone_surrogates_do_not_break_the_registry_listing(
    server: ServerProcess, surrogate_peer: str
) -> None:
    """The peer's swarm info went into the registry as it was decoded: every later
    `GET /swarms/registry` answered 500 (the answer could not be encoded as UTF-8) until the
    swarm was removed. Its text is made valid (U+FFFD) where it is read."""
    headers = auth(server.keys["admin"])
    r = httpx.post(
        f"{server.base_url}/swarms",
        json={"name": "odd", "base_url": surrogate_peer, "volatile": True},
        headers=headers,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    try:
        listed = httpx.get(f"{server.base_url}/swarms/registry", headers=headers, timeout=30)
        assert listed.status_code == 200, listed.text
        assert "bad \ufffd text" in json.dumps(listed.json(), ensure_ascii=False), listed.text
        assert "Traceback" not in server.logs(), server.logs()[-3000:]
    finally:
        httpx.delete(f"{server.base_url}/swarms/odd", headers=headers, timeout=30)
