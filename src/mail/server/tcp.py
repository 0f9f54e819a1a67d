"""TCP_NODELAY on every accepted connection, whoever created the listening socket."""

from __future__ import annotations

import socket
from typing import Any

from fastapi import FastAPI

_INET = (socket.AF_INET, socket.AF_INET6)


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket whose accepted connections have no Nagle delay."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def ensure_nodelay(send: Any) -> None:
    """Disable Nagle on the connection behind an ASGI ``send`` callable, if it can be reached.

    uvicorn passes the bound ``send`` of its per-request cycle object, which holds the
    connection's transport. Other servers: nothing is done (they manage their sockets).
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        return
    try:
        sock = transport.get_extra_info("socket")
    except Exception:  # noqa: BLE001 - an unusual transport: leave it alone
        return
    if sock is None or sock.family not in _INET or sock.proto == socket.IPPROTO_TCP:
        return  # not TCP, or asyncio has already set the option on this connection
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # the connection is already gone


def serving_protocol(send: Any) -> Any:
    """The uvicorn protocol object behind an ASGI ``send`` (None when not found)."""
    on_response = getattr(getattr(send, "__self__", None), "on_response", None)
    return getattr(on_response, "__self__", None)


class MAILFastAPI(FastAPI):
    """FastAPI that turns Nagle off on each HTTP connection it serves (see module doc).

    Under the server's own protocol (``mail.server.http_protocol``), which does that when a
    connection is accepted, the per-request check is skipped after the first request. Under
    uvicorn's own httptools protocol, whose request heads are unbounded, it warns once.
    """

    _protocol_checked = False
    _nodelay_per_request = True
    # The server's `IdempotencyGuard` while it runs (set by the lifespan): the keyed routes
    # find it here with one attribute read (`mail.server.idempotency`).
    idempotency_guard: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self._nodelay_per_request:
            if not self._protocol_checked:
                self._check_protocol(send)
            ensure_nodelay(send)
        elif scope["type"] == "lifespan":
            send = self._startup_errors_in_one_line(send)
        await super().__call__(scope, receive, send)

    def _startup_errors_in_one_line(self, send: Any) -> Any:
        """A start-up that failed with a `StartupError` (kept in ``app.state.startup_error``
        by the lifespan) is reported to the ASGI server as its one line, not a traceback."""

        async def forward(message: Any) -> None:
            if message.get("type") == "lifespan.startup.failed":
                error = getattr(self.state, "startup_error", None)
                if error is not None:
                    message = {**message, "message": f"the MAIL server cannot start: {error}"}
            await send(message)

        return forward

    def _check_protocol(self, send: Any) -> None:
        self._protocol_checked = True
        protocol = serving_protocol(send)
        if protocol is None:
            # Called in-process (a cluster instance host, a test client): no socket, so no
            # protocol to check; importing uvicorn's would cost a new host ~0.1-0.3 s.
            return
        from mail.server.http_protocol import BoundedHttpToolsProtocol, warn_unbounded

        if BoundedHttpToolsProtocol is not None and isinstance(protocol, BoundedHttpToolsProtocol):
            self._nodelay_per_request = False
        else:
            warn_unbounded(protocol)
