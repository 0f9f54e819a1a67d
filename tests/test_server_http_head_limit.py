"""The server's HTTP protocol bounds request heads (and chunked-body framing) as h11 does.

uvicorn's httptools protocol keeps a request head of any size in memory; the server runs
``BoundedHttpToolsProtocol``, which refuses a head over the bound with 431 and closes the
connection. The first tests drive the protocol object directly with a fake transport, so the
packet boundaries are exactly the ones written (one byte at a time, a terminator split across
packets, requests pipelined in one packet); the last ones go through a real socket to the real
app, served the way ``mail server`` serves it.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from mail.server.app_factory import create_app
from mail.server.http_protocol import (
    DEFAULT_MAX_HEAD_BYTES,
    BoundedHttpToolsProtocol,
    http_protocol,
)
from server_fixtures import (
    free_port,
    read_http_response,
    running_server,
    stub_swarms_json,
    write_config,
    write_stub_swarms,
)
from test_server_inprocess import make_config, stub_template
from test_server_nodelay import _accepted_socket_nodelay, serving

pytestmark = pytest.mark.timeout(60)

LIMIT = DEFAULT_MAX_HEAD_BYTES


async def echo_app(scope: Any, receive: Any, send: Any) -> None:
    """Answers with the request's path, header count and body length."""
    assert scope["type"] == "http"
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    reply = json.dumps(
        {"path": scope["path"], "headers": len(scope["headers"]), "body": len(body)}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(reply)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": reply})


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data: Any) -> None:
        assert not self.closed, "write after close"
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Conversation:
    """One connection to a ``BoundedHttpToolsProtocol`` serving ``echo_app``."""

    def __init__(self, limit: int | None = None) -> None:
        config = uvicorn.Config(
            echo_app, log_config=None, access_log=False, h11_max_incomplete_event_size=limit
        )
        self.state = ServerState()
        self.protocol = BoundedHttpToolsProtocol(config, self.state, {})
        self.transport = FakeTransport()
        self.protocol.connection_made(self.transport)

    async def feed(self, *packets: bytes) -> None:
        for packet in packets:
            if self.transport.closed:
                break
            self.protocol.data_received(packet)
        await self.settle()

    async def settle(self) -> None:
        while self.state.tasks:  # every request task the packets started
            await asyncio.gather(*list(self.state.tasks))
        await asyncio.sleep(0)

    def responses(self) -> list[tuple[int, bytes]]:
        """(status, body) of each response written, in order."""
        out: list[tuple[int, bytes]] = []
        data = bytes(self.transport.written)
        while data:
            head, _, rest = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            out.append((status, rest[:length]))
            data = rest[length:]
        return out


def request(path: str = "/", header_bytes: int = 0, body: bytes = b"", total: int = 0) -> bytes:
    """A request; ``total`` pads one header so the head is exactly that many bytes."""
    lines = [f"POST {path} HTTP/1.1", "Host: t", f"Content-Length: {len(body)}"]
    if header_bytes:
        lines.append("X-Pad: " + "a" * header_bytes)
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    if total:
        pad = total - len(head) - len("X-Pad: \r\n")
        assert pad >= 0
        lines.append("X-Pad: " + "a" * pad)
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        assert len(head) == total
    return head + body


def one_byte_at_a_time(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


async def test_a_head_of_exactly_the_bound_is_served() -> None:
    conv = Conversation()
    await conv.feed(request("/a", total=LIMIT))
    assert conv.responses() == [(200, b'{"path": "/a", "headers": 3, "body": 0}')]
    assert not conv.transport.closed


async def test_one_byte_more_is_refused_with_431_and_closed() -> None:
    conv = Conversation()
    await conv.feed(request("/a", total=LIMIT + 1))
    [(status, body)] = conv.responses()
    assert status == 431 and b"too large" in body
    assert conv.transport.closed


async def test_a_head_dribbled_one_byte_at_a_time_is_refused_at_the_bound() -> None:
    conv = Conversation()
    big = request("/a", header_bytes=10 * LIMIT)
    fed = 0
    for byte in one_byte_at_a_time(big):
        if conv.transport.closed:
            break
        conv.protocol.data_received(byte)
        fed += 1
    await conv.settle()
    assert [status for status, _ in conv.responses()] == [431]
    assert conv.transport.closed
    assert fed == LIMIT  # refused as soon as the bound was reached, not after the whole head


async def test_a_dribbled_head_within_the_bound_is_served_and_the_connection_kept() -> None:
    conv = Conversation()
    await conv.feed(*one_byte_at_a_time(request("/a", total=LIMIT, body=b"xyz")))
    await conv.feed(*one_byte_at_a_time(request("/b", total=LIMIT)))
    assert [json.loads(body)["path"] for _, body in conv.responses()] == ["/a", "/b"]
    assert not conv.transport.closed


@pytest.mark.parametrize("split", [1, 2, 3])
async def test_a_terminator_split_across_packets(split: int) -> None:
    first = request("/a", body=b"hello")
    head_end = first.index(b"\r\n\r\n") + split
    second = request("/b", total=LIMIT)
    await (conv := Conversation()).feed(first[:head_end], first[head_end:] + second)
    assert [json.loads(body) for _, body in conv.responses()] == [
        {"path": "/a", "headers": 2, "body": 5},
        {"path": "/b", "headers": 3, "body": 0},
    ]


async def test_pipelined_requests_in_one_packet_are_counted_each_from_its_first_byte() -> None:
    # After a 3 x LIMIT body, a head of exactly the bound in the same packet is still served:
    # the bytes of the first request do not count against the second one's head.
    first = request("/a", body=b"b" * (3 * LIMIT))
    conv = Conversation()
    await conv.feed(first + request("/b", total=LIMIT) + request("/c", total=LIMIT))
    assert [json.loads(body)["path"] for _, body in conv.responses()] == ["/a", "/b", "/c"]
    assert not conv.transport.closed


async def test_an_oversized_pipelined_head_is_refused_after_the_earlier_answer() -> None:
    conv = Conversation()
    await conv.feed(request("/a", body=b"x" * 100) + request("/b", total=LIMIT + 1))
    assert [status for status, _ in conv.responses()] == [200, 431]
    assert conv.transport.closed


async def test_an_oversized_pipelined_head_dribbled_after_a_request_is_refused() -> None:
    conv = Conversation()
    conv.protocol.data_received(request("/a") + b"GET /b HTTP/1.1\r\nX-Pad: ")
    for _ in range(2 * LIMIT):
        if conv.transport.closed:
            break
        conv.protocol.data_received(b"a")
    await conv.settle()
    assert [status for status, _ in conv.responses()] == [200, 431]
    assert conv.transport.closed


async def test_the_bound_follows_uvicorns_h11_setting() -> None:
    conv = Conversation(limit=1024)
    await conv.feed(request("/a", total=1024))
    await conv.feed(request("/b", total=1025))
    assert [status for status, _ in conv.responses()] == [200, 431]


def chunked(path: str, chunks: list[bytes], trailer: bytes = b"") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    return head + body + b"0\r\n" + trailer + b"\r\n"


async def test_chunked_bodies_of_many_small_chunks_are_served() -> None:
    conv = Conversation()
    message = chunked("/a", [b"x"] * 20_000)  # ~100 KB of chunk framing
    await conv.feed(message + chunked("/b", [b"y" * 10]))
    assert [json.loads(body)["body"] for _, body in conv.responses()] == [20_000, 10]


async def test_an_oversized_chunked_trailer_is_refused() -> None:
    conv = Conversation()
    message = chunked("/a", [b"x" * 10])
    trailer = b"X-Trailer: " + b"t" * (2 * LIMIT) + b"\r\n"
    head_and_chunk, _, _ = message.rpartition(b"0\r\n")
    await conv.feed(*one_byte_at_a_time(head_and_chunk + b"0\r\n" + trailer + b"\r\n"))
    assert conv.transport.closed
    assert [status for status, _ in conv.responses()] == [431]


async def test_a_malformed_request_is_still_a_400() -> None:
    conv = Conversation()
    await conv.feed(b"GET / HTTP/1.1\nHost: t\n\n")
    assert conv.transport.closed
    assert conv.transport.written.startswith(b"HTTP/1.1 400")


# ------------------------------------------------------------------ through a real socket


def test_the_server_refuses_an_oversized_head_over_a_real_socket(tmp_path: Path) -> None:
    app = create_app(make_config(tmp_path), template=stub_template())
    with serving(app, http=http_protocol()) as port:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            head, body = read_http_response(conn)
            assert head.startswith(b"HTTP/1.1 200") and b"healthy" in body
            assert _accepted_socket_nodelay(conn) != 0
            pad = b"a" * (2 * LIMIT)
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Pad: " + pad + b"\r\n\r\n")
            head, body = read_http_response(conn)
            assert head.startswith(b"HTTP/1.1 431"), head
            assert b"connection: close" in head.lower()
            assert conn.recv(1) == b""  # closed by the server


def test_mail_server_serves_with_the_bounded_protocol(tmp_path: Path) -> None:
    """`mail server` (a real subprocess): an oversized head gets 431, a normal one 200."""
    write_stub_swarms(tmp_path)
    write_config(tmp_path, port=free_port())
    with running_server(tmp_path) as server:
        with socket.create_connection(("127.0.0.1", server.port)) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"a" * LIMIT + b"\r\n\r\n")
            head, _ = read_http_response(conn)
            assert head.startswith(b"HTTP/1.1 431"), head
        with socket.create_connection(("127.0.0.1", server.port)) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"a" * 8000 + b"\r\n\r\n")
            head, _ = read_http_response(conn)
            assert head.startswith(b"HTTP/1.1 200"), head
        assert "uvicorn's httptools protocol" not in server.logs()


def test_run_server_with_template_uses_the_bounded_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """start_server / run_server_with_template configure uvicorn with the bounded protocol."""
    from mail import MAILSwarmTemplate
    from mail.server import app_factory as app_module

    configs: list[Any] = []

    class FakeServer:
        started = True
        should_exit = False

        def __init__(self, config: Any) -> None:
            configs.append(config)

        def run(self) -> None:
            pass

    monkeypatch.setattr(uvicorn, "Server", FakeServer)
    template = MAILSwarmTemplate.from_swarms_json(stub_swarms_json()[0])
    app_module.run_server_with_template(template, port=8767, host="127.0.0.1", launch_ui=False)
    [config] = configs
    assert config.http.func is BoundedHttpToolsProtocol


def test_uvicorns_own_httptools_protocol_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`uvicorn mail.server:app` with httptools installed picks uvicorn's unbounded protocol:
    the app says so in the log (once), and says nothing under the bounded one."""
    for http, warned in (("httptools", True), (http_protocol(), False)):
        caplog.clear()
        app = create_app(make_config(tmp_path), template=stub_template())
        with caplog.at_level("WARNING", logger="mail.server"), serving(app, http=http) as port:
            with socket.create_connection(("127.0.0.1", port)) as conn:
                for _ in range(2):
                    conn.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
                    head, _ = read_http_response(conn)
                    assert head.startswith(b"HTTP/1.1 200")
        warnings = [r for r in caplog.records if "httptools protocol" in r.getMessage()]
        assert len(warnings) == (1 if warned else 0), (http, warnings)
