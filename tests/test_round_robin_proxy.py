"""The test balancer in front of cluster front ends (tests/support/round_robin.py) relays
like a real one: connections alternate between targets, and a response a target sent before
resetting the connection (a 413 to a body it will not read) still reaches the client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from tests.support.round_robin import RoundRobinProxy

_413 = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 5\r\nconnection: close\r\n\r\nlarge"


class _RefusingTarget:
    """Answers each request 413 as soon as its head arrives, then closes with the body unread
    (the kernel resets the connection): what a server does with a declared oversized body."""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.served = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    head += chunk
                if head.startswith(b"GET /name"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n" + self.name)
                    conn.recv(1)  # until the client closes
                    continue
                conn.sendall(_413)
                self.served += 1
            # Closed with the rest of the body unread: a reset, not a FIN.

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def targets() -> Iterator[list[_RefusingTarget]]:
    made = [_RefusingTarget(b"a"), _RefusingTarget(b"b")]
    yield made
    for target in made:
        target.close()


def _exchange(port: int, request: bytes, body_bytes: int = 0) -> bytes:
    """Send a request head and ``body_bytes`` of body (as far as the connection takes them),
    then read until the connection ends; returns what came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        try:
            sent = 0
            while sent < body_bytes:
                sock.sendall(b"x" * 65536)
                sent += 65536
        except OSError:
            pass  # the server stopped reading and reset the connection
        if body_bytes == 0:
            sock.shutdown(socket.SHUT_WR)  # the request is complete
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:
            pass
        return received


def test_connections_alternate_between_targets(targets: list[_RefusingTarget]) -> None:
    proxy = RoundRobinProxy([t.port for t in targets]).start()
    try:
        names = [
            _exchange(proxy.port, b"GET /name HTTP/1.1\r\nhost: x\r\n\r\n")[-1:] for _ in range(4)
        ]
    finally:
        proxy.stop()
    assert names == [b"a", b"b", b"a", b"b"]
    assert proxy.connections == [2, 2]


def test_a_response_sent_before_a_reset_reaches_the_client(targets: list[_RefusingTarget]) -> None:
    proxy = RoundRobinProxy([t.port for t in targets]).start()
    size = 16 * 1024 * 1024
    head = f"POST /message HTTP/1.1\r\nhost: x\r\ncontent-length: {size}\r\n\r\n".encode()
    try:
        answers = [_exchange(proxy.port, head, size) for _ in range(10)]
    finally:
        proxy.stop()
    assert sum(t.served for t in targets) == 10
    assert answers == [_413] * 10
