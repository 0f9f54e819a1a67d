"""A request head must arrive within `[server.settings] request_head_timeout`, its body
within `request_body_timeout` (plus a second per 500 bytes received).

A real `mail server` (started from a scratch folder, its mail.toml setting the timeout to
2 s; once as installed, with httptools, once as without the `fast` extra, on h11) is talked to
over raw sockets: a connection that sends nothing is closed, one that sends
its head a line at a time (slowloris) is answered 408 and closed, on a fresh connection and
after a response on a kept-alive one. A body sent a byte at a time is answered 408; one that
comes late or long but steadily, a slow handler and a long event stream run past the head's
time, and the connection serves on. Past `max_connections` (4 here) a new connection is
answered 503 and closed.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Iterator

import pytest

from server_fixtures import (
    REPO_ROOT,
    ROOT_ALICE_BOB,
    ServerProcess,
    keyed_stub_server,
    read_http_response,
)

pytestmark = pytest.mark.timeout(180)

HEAD_TIMEOUT = 2.0
BODY_TIMEOUT = 6.0
MAX_CONNECTIONS = 4
CLOSED_WITHIN = 20.0  # the timeout, with room for two loaded cores
HEALTH = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp(request.param)
    env = {}
    if request.param == "h11":  # a server installed without the `fast` extra
        (directory / "no_httptools").mkdir()
        (directory / "no_httptools" / "httptools.py").write_text("raise ImportError\n")
        env["PYTHONPATH"] = os.pathsep.join([str(directory / "no_httptools"), str(REPO_ROOT)])
    extra = (
        f"request_head_timeout = {HEAD_TIMEOUT}\nrequest_body_timeout = {BODY_TIMEOUT}\n"
        f"max_connections = {MAX_CONNECTIONS}"
    )
    with keyed_stub_server(directory, ROOT_ALICE_BOB, extra=extra, env=env) as proc:
        yield proc


def connect(server: ServerProcess) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", server.port))
    conn.settimeout(CLOSED_WITHIN)
    return conn


def read_to_close(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (fails on a timeout)."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def message_request(server: ServerProcess, body: dict[str, object]) -> tuple[bytes, bytes]:
    payload = json.dumps(body).encode()
    head = (
        b"POST /message HTTP/1.1\r\nHost: t\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer " + server.keys["alice"].encode() + b"\r\n"
        b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n"
    )
    return head, payload


def assert_408(data: bytes, what: bytes = b"head") -> None:
    head, _, text = data.partition(b"\r\n\r\n")
    assert head.lower().startswith(b"http/1.1 408 request timeout"), data
    assert b"\r\nconnection: close" in head.lower(), data
    assert b"\r\ncontent-type: application/json" in head.lower(), data
    assert json.loads(text) == {"detail": f"request {what.decode()} not received in time"}, data


def send_slowly_until_answered(conn: socket.socket, line: bytes) -> float:
    """Send ``line`` every 0.5 s until the server answers or closes; seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < CLOSED_WITHIN:
        conn.sendall(line)
        if select.select([conn], [], [], 0.5)[0]:
            return time.monotonic() - started
    raise AssertionError(f"still open after {CLOSED_WITHIN} s of a slow head")


def test_a_connection_that_sends_nothing_is_closed(server: ServerProcess) -> None:
    with connect(server) as conn:
        started = time.monotonic()
        assert read_to_close(conn) == b""  # closed without an answer
        assert time.monotonic() - started >= HEAD_TIMEOUT - 0.5


def test_a_head_sent_a_line_at_a_time_is_answered_408(server: ServerProcess) -> None:
    with connect(server) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\n")
        took = send_slowly_until_answered(conn, b"x-slow: 1\r\n")
        assert took >= HEAD_TIMEOUT - 0.5
        assert_408(read_to_close(conn))


def test_after_a_response_the_next_head_gets_the_same_time(server: ServerProcess) -> None:
    """On a kept-alive connection the timer starts again at the end of each response."""
    with connect(server) as conn:
        conn.sendall(HEALTH)
        assert read_http_response(conn)[0].startswith(b"HTTP/1.1 200")
        conn.sendall(b"GET /health HTTP/1.1\r\n")
        send_slowly_until_answered(conn, b"x-slow: 1\r\n")
        assert_408(read_to_close(conn))
    with connect(server) as conn:
        conn.sendall(HEALTH)
        assert read_http_response(conn)[0].startswith(b"HTTP/1.1 200")
        assert read_to_close(conn) == b""  # idle after the response: closed, no answer


def test_a_slow_body_and_a_slow_handler_are_not_cut(server: ServerProcess) -> None:
    with connect(server) as conn:
        head, payload = message_request(server, {"body": f"SLEEP {2 * HEAD_TIMEOUT} slow"})
        conn.sendall(head)
        time.sleep(1.5 * HEAD_TIMEOUT)  # the head is complete: the body may take its time
        conn.sendall(payload)
        answer, body = read_http_response(conn)
        assert answer.startswith(b"HTTP/1.1 200"), answer + body
        assert json.loads(body)["response"] == "echo[alice]: slow"
        conn.sendall(HEALTH)  # the connection serves on
        assert read_http_response(conn)[0].startswith(b"HTTP/1.1 200")


def test_a_body_sent_a_byte_at_a_time_is_answered_408(server: ServerProcess) -> None:
    head, payload = message_request(server, {"body": "x" * 200})
    with connect(server) as conn:
        conn.sendall(head)
        took = send_slowly_until_answered(conn, b" ")  # JSON allows leading blanks
        assert took >= BODY_TIMEOUT - 0.5
        assert_408(read_to_close(conn), b"body")
    with connect(server) as conn:  # the server serves on
        conn.sendall(HEALTH)
        assert read_http_response(conn)[0].startswith(b"HTTP/1.1 200")


def test_chunk_framing_earns_no_time(server: ServerProcess) -> None:
    """A chunked body of one byte a chunk, each with a long chunk extension: the framing is
    not body, and the body is answered 408 like any trickle."""
    with connect(server) as conn:
        conn.sendall(
            b"POST /message HTTP/1.1\r\nHost: t\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + server.keys["alice"].encode() + b"\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        took = send_slowly_until_answered(conn, b"1;" + b"e" * 1000 + b"\r\n \r\n")
        assert took >= BODY_TIMEOUT - 0.5
        assert_408(read_to_close(conn), b"body")


def test_a_pipelined_bodys_time_starts_once_the_request_before_is_answered(
    server: ServerProcess,
) -> None:
    """A request answered slowly, and behind it (in the same write) a second one whose body
    never ends: the first gets its answer (not a 408 meant for the second), the second its
    408 a body's time after that."""
    first_head, first_body = message_request(server, {"body": f"SLEEP {BODY_TIMEOUT + 0.5} one"})
    second_head, _ = message_request(server, {"body": "x" * 200})
    with connect(server) as conn:
        conn.sendall(first_head + first_body + second_head + b'{"body"')
        answer, body = read_http_response(conn)
        assert answer.startswith(b"HTTP/1.1 200"), answer + body
        assert json.loads(body)["response"] == "echo[alice]: one"
        answered = time.monotonic()
        assert_408(read_to_close(conn), b"body")
        took = time.monotonic() - answered  # a body's time after the answer, no more
        assert BODY_TIMEOUT - 0.5 <= took < BODY_TIMEOUT + 3.5, took


def test_a_body_behind_100_continue_gets_a_bodys_time_from_the_100(server: ServerProcess) -> None:
    """`Expect: 100-continue`: the body's time runs from the server's `100 Continue` (the time
    before it is not counted, and only that time)."""
    head, _ = message_request(server, {"body": "x" * 200})
    with connect(server) as conn:
        conn.sendall(head.replace(b"\r\n\r\n", b"\r\nexpect: 100-continue\r\n\r\n"))
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += conn.recv(1)
        assert interim.startswith(b"HTTP/1.1 100"), interim
        continued = time.monotonic()
        assert_408(read_to_close(conn), b"body")
        took = time.monotonic() - continued
        assert BODY_TIMEOUT - 0.5 <= took < BODY_TIMEOUT + 3.5, took


def test_a_long_body_sent_steadily_is_read_past_the_bodys_time(server: ServerProcess) -> None:
    """3 KB a second earns six seconds a second: a body taking 1.5 x the time is read."""
    head, payload = message_request(server, {"body": "steady " + "x" * 24_000})
    pieces = [payload[i : i + 1500] for i in range(0, len(payload), 1500)]
    pause = 1.5 * BODY_TIMEOUT / len(pieces)
    with connect(server) as conn:
        conn.sendall(head)
        for piece in pieces:
            time.sleep(pause)
            conn.sendall(piece)
        answer, body = read_http_response(conn)
        assert answer.startswith(b"HTTP/1.1 200"), answer + body
        assert json.loads(body)["response"].startswith("echo[alice]: steady xxx")


def test_after_an_answer_given_before_the_body_the_connection_is_timed_again(
    server: ServerProcess,
) -> None:
    """A request refused before its body is read (no key: 401); its body comes later, then
    nothing: the connection is closed like any idle one."""
    with connect(server) as conn:
        conn.sendall(b"POST /message HTTP/1.1\r\nHost: t\r\ncontent-length: 2\r\n\r\n")
        assert read_http_response(conn)[0].startswith(b"HTTP/1.1 401")
        conn.sendall(b"{}")
        started = time.monotonic()
        assert read_to_close(conn) == b""  # closed without an answer
        assert time.monotonic() - started >= HEAD_TIMEOUT - 0.5


def test_a_long_event_stream_is_not_cut(server: ServerProcess) -> None:
    with connect(server) as conn:
        head, payload = message_request(
            server, {"body": f"SLEEP {2 * HEAD_TIMEOUT} streamed", "stream": True}
        )
        conn.sendall(head + payload)
        data = b""
        while not data.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of the stream
            chunk = conn.recv(65536)
            assert chunk, f"closed during the stream: {data!r}"
            data += chunk
        assert data.startswith(b"HTTP/1.1 200"), data
        assert b"echo[alice]: streamed" in data
        conn.sendall(HEALTH)
        assert read_http_response(conn)[0].startswith(b"HTTP/1.1 200")


def test_a_connection_past_max_connections_is_answered_503(server: ServerProcess) -> None:
    held = [connect(server) for _ in range(MAX_CONNECTIONS)]
    try:
        with connect(server) as conn:
            answer = read_to_close(conn)
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
            assert b"\r\nconnection: close\r\n" in answer.lower()
        for conn in held:
            read_to_close(conn)  # closed by the server (the head timeout): no longer counted
    finally:
        for conn in held:
            conn.close()
    with connect(server) as conn:
        conn.sendall(HEALTH)
        assert read_http_response(conn)[0].startswith(b"HTTP/1.1 200")
