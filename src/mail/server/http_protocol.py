"""The HTTP/1.1 protocol the server runs on: uvicorn's httptools protocol with a bounded head,
in size and in time."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from mail.server.logs import quick_access_logger

logger = logging.getLogger("mail.server")

DEFAULT_MAX_HEAD_BYTES = 16 * 1024  # h11's default bound on an incomplete event
# Seconds a request head may take to arrive, from the connection's start or the end of the
# previous response ([server.settings] request_head_timeout).
DEFAULT_HEAD_SECONDS = 30.0
DEFAULT_BODY_SECONDS = 30.0  # [server.settings] request_body_timeout (see `_RequestClock`)
_HEAD_END = b"\r\n\r\n"


def _refusal(status: bytes, text: str) -> bytes:
    """A whole response written by the protocol itself: a JSON error, as every other."""
    body = json.dumps({"detail": text}).encode()
    return (
        b"HTTP/1.1 " + status + b"\r\n"
        b"content-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n" + body
    )


_RESPONSE_431 = _refusal(b"431 Request Header Fields Too Large", "request head too large")
_RESPONSE_408_HEAD = _refusal(b"408 Request Timeout", "request head not received in time")
_RESPONSE_408_BODY = _refusal(b"408 Request Timeout", "request body not received in time")
_RESPONSE_503 = _refusal(b"503 Service Unavailable", "too many open connections")

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools missing: uvicorn's h11 protocol, which bounds heads itself
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def http_protocol(
    head_seconds: float = DEFAULT_HEAD_SECONDS,
    max_connections: int = 0,
    body_seconds: float = DEFAULT_BODY_SECONDS,
) -> Any:
    """What to pass as ``uvicorn.Config(http=...)``: the bounded httptools protocol (without
    httptools, h11's), whose requests must arrive in time (`_RequestClock`), serving at most
    ``max_connections`` at once (0: no bound), and at most half the open-file limit."""
    protocol = BoundedHttpToolsProtocol if HttpToolsProtocol is not None else TimedH11Protocol
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if resource else -1  # -1: none
    if max_connections and 0 < files // 2 < max_connections:
        max_connections = max(1, files // 2)
        logger.warning(
            "serving at most %d HTTP connections at once, half the open-file limit (ulimit "
            "-n %d) below [server.settings] max_connections: raise the limit to serve more",
            max_connections,
            files,
        )
    return functools.partial(
        protocol,
        head_seconds=head_seconds,
        body_seconds=body_seconds,
        max_connections=max_connections,
    )


def warn_unbounded(protocol: Any) -> None:
    """Warn when uvicorn's own httptools protocol serves the app (`uvicorn mail.server:app`
    picks it when httptools is installed): its request heads are unbounded."""
    if HttpToolsProtocol is not None and isinstance(protocol, HttpToolsProtocol):
        logger.warning(
            "served by uvicorn's httptools protocol, which accepts request heads of any size: "
            "pass --http mail.server.http_protocol:BoundedHttpToolsProtocol"
        )


REFUSALS_LOG_INTERVAL = 60.0  # seconds between two warnings of connections refused (503)
_refusals_logged = float("-inf")
# Bytes a second a client sending a body earns time at: a body must be complete within
# `request_body_timeout` of its head's end plus a second for each BODY_MIN_RATE bytes received.
BODY_MIN_RATE = 500
HOLD_CHECK = 1.0  # seconds between looks at a body the server holds back (`_RequestClock`)


def _client(protocol: Any) -> str:
    client = protocol.client
    return f"{client[0]}:{client[1]}" if client else "unknown client"


class _RequestClock:
    """The time a connection has left to send its next request: its head (``head_seconds``
    from the connection's start or the end of a response; a started head is answered 408),
    then its body (``body_seconds`` from the head's end plus a second per `BODY_MIN_RATE`
    bytes received; answered 408 unless a response began). A connection past
    ``max_connections`` is answered 503 at once. Each expiry closes the connection."""

    def __init__(
        self, protocol: Any, head_seconds: float, body_seconds: float, max_connections: int
    ) -> None:
        self._protocol, self.max_connections = protocol, max_connections
        self.head_seconds, self.body_seconds = head_seconds, body_seconds
        self._timer: asyncio.TimerHandle | None = None
        self._body_since: float | None = None  # when the body's time began (None: a head's)
        self.body_bytes = 0  # body bytes received since then
        self._held = False  # the server held this body back at the last look (`_wait_body`)

    def open(self) -> None:
        """Start the first wait, or refuse the connection (503) past ``max_connections``."""
        if len(self._protocol.connections) > self.max_connections > 0:
            self._protocol.transport.write(_RESPONSE_503)
            self._protocol.transport.close()
            global _refusals_logged
            now = self._protocol.loop.time()
            if now - _refusals_logged >= REFUSALS_LOG_INTERVAL:  # not once per connection
                _refusals_logged = now
                logger.warning(
                    "%d HTTP connections are open ([server.settings] max_connections): new "
                    "ones are answered 503",
                    self.max_connections,
                )
        else:
            self.start()

    def start(self) -> None:
        """Wait for a request head."""
        self.stop()
        self._timer = self._protocol.loop.call_later(self.head_seconds, self._expired)

    def start_body(self) -> None:
        """Wait for the body of a request whose head is complete (the body bytes counted
        since its head stay counted)."""
        received = self.body_bytes
        self.stop()
        self.body_bytes = received
        self._wait_body()

    def _wait_body(self) -> None:
        """The body's time begins now; while the server holds the body back (a 100 Continue
        not sent, reading paused, a request queued behind another) it begins again at each
        look, every `HOLD_CHECK` seconds, so a hold costs the client at most that."""
        loop = self._protocol.loop
        self._body_since, self._held = loop.time(), self._protocol.body_held()
        wait = min(HOLD_CHECK, self.body_seconds) if self._held else self.body_seconds
        self._timer = loop.call_later(wait, self._expired)

    def running(self) -> bool:
        return self._timer is not None

    def in_body(self) -> bool:
        return self._body_since is not None

    def stop(self) -> None:
        self._body_since, self.body_bytes = None, 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        protocol = self._protocol
        if protocol.transport.is_closing() or protocol.upgraded:
            return  # closed, or upgraded (a WebSocket under your own uvicorn)
        if self._body_since is not None:
            self._body_expired(protocol)
            return
        if protocol.head_begun():
            logger.warning(
                "request head from %s not complete after %g s: refused (408)",
                _client(protocol),
                self.head_seconds,
            )
            protocol.transport.write(_RESPONSE_408_HEAD)
        protocol.transport.close()

    def _body_expired(self, protocol: Any) -> None:
        if self._held or protocol.body_held():
            self._wait_body()
            return
        cycle = protocol.cycle
        assert self._body_since is not None
        allowed = self.body_seconds + self.body_bytes / BODY_MIN_RATE
        left = self._body_since + allowed - protocol.loop.time()
        if left > 0:  # bytes came: the time they earned
            self._timer = protocol.loop.call_later(left, self._expired)
            return
        logger.warning(
            "request body from %s not complete after %g s (%d bytes): refused (408)",
            _client(protocol),
            allowed,
            self.body_bytes,
        )
        if cycle is not None:
            if not cycle.response_started:
                protocol.transport.write(_RESPONSE_408_BODY)
            cycle.disconnected = True  # the application's receive() says so
            cycle.message_event.set()
        protocol.transport.close()


class TimedH11Protocol(H11Protocol):
    """uvicorn's ``H11Protocol`` (h11 bounds heads in size) with requests bounded in time."""

    def __init__(
        self,
        config: Any,
        *args: Any,
        head_seconds: float = DEFAULT_HEAD_SECONDS,
        max_connections: int = 0,
        body_seconds: float = DEFAULT_BODY_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, *args, **kwargs)
        self.head_clock = _RequestClock(self, head_seconds, body_seconds, max_connections)
        self._timed_cycle: Any = None  # the request whose body the clock times
        self.upgraded = False

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_clock.open()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_clock.stop()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        held = len(before.body) if before is not None else 0
        super().data_received(data)
        if self.upgraded:
            return
        state, clock, cycle = self.conn.their_state, self.head_clock, self.cycle
        if state is h11.IDLE:  # a head to come (after the body of an early-answered request)
            if not clock.running() or clock.in_body():
                clock.start()
        elif state is h11.SEND_BODY and cycle is not None:  # the head is complete
            if not clock.in_body() or cycle is not self._timed_cycle:
                self._timed_cycle = cycle  # its body's time begins
                clock.stop()  # (nothing counted of another request's body)
                clock.start_body()
            if self.conn.our_state is h11.DONE:  # answered early: uvicorn drops the body
                clock.body_bytes += len(data)
            else:  # body bytes this read brought (not framing; the application takes its own)
                clock.body_bytes += len(cycle.body) - (held if cycle is before else 0)
        else:  # the request is complete
            clock.stop()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # a pipelined head already read is taken on here
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE:
            self.head_clock.start()
        elif self.conn.their_state is h11.SEND_BODY and self.cycle is not self._timed_cycle:
            self._timed_cycle = self.cycle  # a pipelined request's body
            self.head_clock.start_body()
            self.head_clock.body_bytes = len(self.cycle.body)

    def head_begun(self) -> bool:
        return bool(self.conn.trailing_data[0])  # h11 holds what came of the head

    def handle_websocket_upgrade(self, event: Any) -> None:
        self.upgraded = True  # (the connection is the WebSocket protocol's now: untimed)
        self.head_clock.stop()
        super().handle_websocket_upgrade(event)

    def body_held(self) -> bool:
        return self.flow.read_paused or self.conn.they_are_waiting_for_100_continue


def set_nodelay(transport: Any) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # the connection is already gone


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's ``HttpToolsProtocol`` with request heads bounded in size (see module
        doc) and requests in time (`_RequestClock`: uvicorn's own timer only closes a
        kept-alive connection that stays idle, and the first byte stops it)."""

        def __init__(
            self,
            config: Any,
            *args: Any,
            head_seconds: float = DEFAULT_HEAD_SECONDS,
            max_connections: int = 0,
            body_seconds: float = DEFAULT_BODY_SECONDS,
            **kwargs: Any,
        ) -> None:
            super().__init__(config, *args, **kwargs)
            # Access lines skip the logging record when they go to the server's log alone.
            self.access_logger = quick_access_logger(self.access_logger)  # type: ignore[assignment]
            self.max_head_bytes: int = (
                getattr(config, "h11_max_incomplete_event_size", None) or DEFAULT_MAX_HEAD_BYTES
            )
            self._in_head = True  # the parser waits for (the rest of) a request head
            self._head_bytes = 0  # bytes of the current head handed to the parser so far
            self._head_tail = b""  # the last bytes of the head handed over (a split CRLF CRLF)
            self._framing_bytes = 0  # non-body bytes of a chunked body since its last chunk
            self._body_left: int | None = None  # bytes of a Content-Length body still to come
            self._piece_body = 0  # body bytes the parser reported for the current piece
            self._piece_chunks = False  # a chunk header was parsed in the current piece
            self._piece_ended = False  # a message ended in the current piece
            self._refused = False  # a bound was passed: the connection takes no more data
            self.head_clock = _RequestClock(self, head_seconds, body_seconds, max_connections)
            self.upgraded = False
            self._head_begun = False  # the parser has seen the first byte of the awaited head

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            set_nodelay(transport)
            super().connection_made(transport)
            self.head_clock.open()

        def connection_lost(self, exc: Exception | None) -> None:
            self.head_clock.stop()
            super().connection_lost(exc)

        def head_begun(self) -> bool:
            return self._head_begun

        def handle_websocket_upgrade(self) -> None:
            self.upgraded = True  # (the connection is the WebSocket protocol's now: untimed)
            self.head_clock.stop()
            super().handle_websocket_upgrade()

        def body_held(self) -> bool:
            cycle = self.cycle
            return (
                self.flow.read_paused
                or bool(self.pipeline)  # a request queued behind one still answered
                or (cycle is not None and cycle.waiting_for_100_continue)
            )

        # -------------------------------------------------------------- feeding the parser
        def data_received(self, data: bytes) -> None:
            self._feed(data)
            # A body still to come (not when it came with its head: no timer for most
            # requests); a body after an early answer keeps its clock.
            if not self._in_head and not self.head_clock.running():
                if not self._refused and not self.transport.is_closing():
                    self.head_clock.start_body()

        def _feed(self, data: bytes) -> None:
            view = memoryview(data)
            start, end = 0, len(data)
            while start < end:
                if self._refused or self.parser is None or self.transport.is_closing():
                    return  # a refusal or a parse error ended the connection
                if self.upgraded:
                    return  # a WebSocket under your own uvicorn: not ours to parse
                at_head_end = False
                if self._in_head:
                    size, at_head_end = self._head_piece(data, start, end)
                    tail = data[max(start, start + size - 3) : start + size]
                    self._head_tail = tail if size >= 3 else (self._head_tail + tail)[-3:]
                elif self._body_left is not None and self._body_left > 0:
                    size = min(end - start, self._body_left)
                else:
                    # A chunked body: pieces no larger than half the bound, so that the framing
                    # of many small chunks in one piece never counts for more than it is.
                    size = min(end - start, max(1, self.max_head_bytes // 2))
                was_in_head = self._in_head
                self._piece_body, self._piece_chunks, self._piece_ended = 0, False, False
                super().data_received(view[start : start + size])  # type: ignore[arg-type]
                start += size
                if not self._account(size, was_in_head, at_head_end):
                    self._refuse_head()
                    return

        def _head_piece(self, data: bytes, start: int, end: int) -> tuple[int, bool]:
            """How many bytes to hand over while in a head: up to its end (then True), at most
            what is left of the bound."""
            stop = min(end, start + self.max_head_bytes - self._head_bytes)
            found = data.find(_HEAD_END, start, stop)
            if found >= 0:
                return found + len(_HEAD_END) - start, True
            tail = self._head_tail
            for carried in (3, 2, 1):  # the terminator straddles the last piece and this one
                if tail.endswith(_HEAD_END[:carried]) and data.startswith(
                    _HEAD_END[carried:], start, stop
                ):
                    return len(_HEAD_END) - carried, True
            return stop - start, False

        def _account(self, size: int, was_in_head: bool, at_head_end: bool) -> bool:
            """Count the piece just parsed; False when a bound is passed."""
            non_body = size - self._piece_body
            if self._piece_ended:
                if self._in_head:
                    # What followed the end of a message in this piece starts the next head:
                    # nothing after a head that ended the piece; for a body, its non-body
                    # bytes (exact for Content-Length, whose pieces end where the body ends).
                    self._head_bytes = 0 if was_in_head and at_head_end else non_body
                    self._head_tail = b""
            elif self._in_head:
                self._head_bytes += size
            elif was_in_head:
                pass  # the piece ended where the head ended
            elif self._body_left is None:
                if self._piece_chunks:
                    self._framing_bytes = non_body
                else:
                    self._framing_bytes += non_body
                return self._framing_bytes < self.max_head_bytes
            return not (self._in_head and self._head_bytes >= self.max_head_bytes)

        def _refuse_head(self) -> None:
            logger.warning(
                "request head or body framing over %d bytes from %s: refused (431)",
                self.max_head_bytes,
                f"{self.client[0]}:{self.client[1]}" if self.client else "unknown client",
            )
            self._refused = True  # nothing more reaches the parser
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                self._answer_431()
            elif not self._in_head:
                # The framing of the body being read: the request cannot be completed.
                if not cycle.response_started:
                    self.transport.write(_RESPONSE_431)
                cycle.disconnected = True
                cycle.message_event.set()
                self.transport.close()
            else:
                # A pipelined head behind a request still being answered: answer that one
                # first (on_response_complete), then refuse.
                self.flow.pause_reading()

        def _answer_431(self) -> None:
            if not self.transport.is_closing():
                self.transport.write(_RESPONSE_431)
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            idle = self.cycle is None or self.cycle.response_complete  # no pipelined request
            if self._refused and idle:
                self._answer_431()
            elif idle and not self.transport.is_closing() and self._in_head:
                self.head_clock.start()  # (a body still coming keeps its own clock)

        # -------------------------------------------------------------- parser callbacks
        def on_message_begin(self) -> None:
            self._head_begun = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._head_begun = False
            self._in_head = False
            self._head_bytes = 0
            self._head_tail = b""
            self._framing_bytes = 0
            self._body_left = _content_length(self.headers)
            self.head_clock.stop()  # (`data_received` times a body still to come)
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._piece_body += len(body)
            self.head_clock.body_bytes += len(body)
            if self._body_left is not None:
                self._body_left -= len(body)
            super().on_body(body)

        def on_chunk_header(self) -> None:
            self._piece_chunks = True

        def on_message_complete(self) -> None:
            clock, cycle = self.head_clock, self.cycle
            if clock.in_body():
                if cycle is not None and cycle.response_complete:
                    clock.start()  # the body of an early-answered request: a head to come
                else:
                    clock.stop()
            self._in_head = True
            self._body_left = None
            self._piece_ended = True
            super().on_message_complete()

else:  # pragma: no cover - httptools is a dependency
    BoundedHttpToolsProtocol = None  # type: ignore[assignment,misc]


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared body length, or None for a chunked (or otherwise framed) body."""
    length: int | None = 0
    for name, value in headers:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
    return length
