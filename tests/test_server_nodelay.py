"""Every accepted connection has TCP_NODELAY, whoever binds the listening socket.

Without it, each response after the first on a kept-alive connection waits ~40 ms (uvicorn
writes a response's head and body separately; Nagle + the client's delayed ACK). The tests
serve the real app with a real uvicorn server in a thread of this process, talk HTTP/1.1 over
one kept-alive connection, and read the option off the server's accepted socket (found among
this process's file descriptors by its peer address). No timing assertions.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from mail.commands.server import _bind
from mail.server.app_factory import create_app
from mail.server.http_protocol import http_protocol
from server_fixtures import read_http_response
from test_server_inprocess import make_config, stub_template

pytestmark = pytest.mark.timeout(60)


@contextlib.contextmanager
def serving(
    app: Any, sockets: list[socket.socket] | None = None, http: Any = "auto"
) -> Iterator[int]:
    """Run ``app`` under uvicorn (``http`` protocol) in a thread; yields its port."""
    port = 0 if sockets else _free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        http=http,
        ws="none",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the server thread died during startup"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield sockets[0].getsockname()[1] if sockets else port
    finally:
        server.should_exit = True
        thread.join(15)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exchange(conn: socket.socket, path: str) -> bytes:
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    head, body = read_http_response(conn)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"connection: close" not in head.lower()
    return body


def _accepted_socket_nodelay(client: socket.socket) -> int:
    """TCP_NODELAY of the server-side socket connected to ``client`` (same process)."""
    want = client.getsockname()
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            probe = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        with probe:
            try:
                if probe.type != socket.SOCK_STREAM or probe.getpeername() != want:
                    continue
            except OSError:
                continue
            return probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    raise AssertionError("the accepted socket was not found")


def _check_kept_alive_connection(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        for _ in range(3):  # several requests on one connection, as clients do
            assert b"healthy" in _exchange(conn, "/health")
        assert _accepted_socket_nodelay(conn) != 0


def test_mail_server_listening_socket(tmp_path: Path) -> None:
    """The socket and protocol `mail server` uses give nodelay connections."""
    sock = _bind("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP
    app = create_app(make_config(tmp_path), template=stub_template())
    with serving(app, sockets=[sock], http=http_protocol()) as port:
        _check_kept_alive_connection(port)
    sock.close()


# uvicorn's own protocols (as `uvicorn mail.server:app` picks them) and the server's own one.
PROTOCOLS = ["h11", "httptools", http_protocol()]


@pytest.mark.parametrize("http", PROTOCOLS, ids=["h11", "httptools", "bounded"])
def test_socket_bound_by_someone_else(tmp_path: Path, http: Any) -> None:
    """A proto-0 socket without options (gunicorn, systemd, --fd): the app or the server's
    protocol sets the option, on every connection (the second one too)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    assert sock.proto == 0
    app = create_app(make_config(tmp_path), template=stub_template())
    with serving(app, sockets=[sock], http=http) as port:
        _check_kept_alive_connection(port)
        _check_kept_alive_connection(port)
    sock.close()


def test_uvicorn_binding_host_and_port(tmp_path: Path) -> None:
    """`uvicorn mail.server:app`, start_server and run_server_with_template bind this way."""
    app = create_app(make_config(tmp_path), template=stub_template())
    with serving(app) as port:
        _check_kept_alive_connection(port)


def test_the_check_sees_a_connection_without_nodelay() -> None:
    """The probe itself can tell: a plain proto-0 accept keeps Nagle on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as client:
            accepted, _ = listener.accept()
            with accepted:
                assert _accepted_socket_nodelay(client) == 0
