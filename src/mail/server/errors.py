"""The application's outer layer: the FastAPI class (TCP_NODELAY on every connection), the
request body limit (enforced while the body is read) and error shaping: 400 for bad input
(naming the field), 500 with a correlation id for our bugs.

Every error body is ``{"detail": "<message>"}``; unexpected exceptions add
``"correlation_id"``, which also appears in the server log next to the traceback.
"""

from __future__ import annotations

import logging
import socket
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mail.server.jsonio import dumps

logger = logging.getLogger("mail.server")


class BadRequest(HTTPException):
    """A 400 whose detail names the offending field."""

    def __init__(self, detail: str) -> None:
        super().__init__(status_code=400, detail=detail)


def type_name(value: Any) -> str:
    return type(value).__name__


def _describe_validation_error(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid request"
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
    field = ".".join(loc)
    kind = err.get("type", "")
    if kind == "missing":
        return f"parameter '{field}' is required"
    if kind in ("json_invalid", "model_attributes_type") or not field:
        return f"error parsing request: {err.get('msg', 'invalid body')}"
    return f"parameter '{field}' is invalid: {err.get('msg')}"


async def _validation_error_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    # FastAPI's default is a 422 with a list; clients of MAIL expect 400 and a readable detail.
    return JSONResponse({"detail": _describe_validation_error(exc)}, status_code=400)


class CorrelationIdMiddleware:
    """Turn an unhandled exception into a 500 with an id that can be found in the log.

    Written as plain ASGI (not BaseHTTPMiddleware) so it costs nothing on the happy path.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            correlation_id = uuid.uuid4().hex[:16]
            logger.exception(
                "unhandled error [correlation_id=%s] %s %s",
                correlation_id,
                scope.get("method"),
                scope.get("path"),
            )
            if started:
                # Headers already went out (e.g. mid-stream); all we can do is end the response.
                return
            response = JSONResponse(
                {
                    "detail": f"internal server error (correlation id {correlation_id})",
                    "correlation_id": correlation_id,
                },
                status_code=500,
            )
            await response(scope, receive, send)


# google.rpc's status names, for refusals under /a2a/ (the A2A HTTP+JSON binding). A body
# over the size limit is RESOURCE_EXHAUSTED, as gRPC names a message over its size limit; a
# content type (or coding) not taken is INVALID_ARGUMENT, as A2A names ContentTypeNotSupported.
_GRPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    413: "RESOURCE_EXHAUSTED",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    """A refusal's body: MAIL's ``{"detail"}``, or under ``/a2a/`` the HTTP+JSON binding's
    ``{"error": {"code", "status", "message"}}`` (google.rpc.Status)."""
    if path.startswith("/a2a/"):
        name = _GRPC_STATUS.get(status, "UNKNOWN")
        return {"error": {"code": status, "status": name, "message": message}}
    return {"detail": message}


async def _store_unavailable_handler(request: Request, exc: Exception) -> JSONResponse:
    # The database is failing (a full disk, PostgreSQL down): a failing dependency, worth
    # retrying later, and nothing of this request was stored.
    body = error_body(request.url.path, 503, str(exc))
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})


def install_error_handling(app: FastAPI) -> None:
    from mail.store.base import StoreUnavailableError

    app.add_exception_handler(RequestValidationError, _validation_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(StoreUnavailableError, _store_unavailable_handler)
    app.add_middleware(CorrelationIdMiddleware)


def too_large_detail(limit: int) -> str:
    return (
        f"request body too large: the limit is {limit} bytes ([server.settings] max_request_body)"
    )


class RequestBodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_detail(limit))


DRAIN_BYTES = 16 * 1024 * 1024  # body bytes past the limit read and dropped after a 413


class BodyLimitMiddleware:
    """Pure ASGI middleware (no buffering, no task group) around the whole application."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        encoding = _content_encoding(scope)
        if encoding is not None:
            await _refuse_encoding(scope, send, encoding)
            return
        if self.limit <= 0:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            # A client that writes its whole body before it reads would get a reset, not
            # the 413, were the connection closed on unread bytes: up to DRAIN_BYTES more
            # are read and dropped (the protocol's body clock still times them).
            drain = declared <= self.limit + DRAIN_BYTES
            await _answer(scope, send, 413, too_large_detail(self.limit), close=not drain)
            return
        limit = self.limit
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise RequestBodyTooLarge(limit)
            return message

        await self.app(scope, counting_receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _content_encoding(scope: Scope) -> str | None:
    """The request's content codings other than ``identity`` (None when there are none)."""
    codings: list[str] = []
    for name, value in scope.get("headers", ()):
        if name == b"content-encoding":
            text = value.decode("latin-1")
            codings += [c.strip() for c in text.split(",") if c.strip().lower() != "identity"]
    codings = [c for c in codings if c]
    return ", ".join(codings)[:100] if codings else None


async def _refuse_encoding(scope: Scope, send: Send, encoding: str) -> None:
    detail = (
        f"request bodies with Content-Encoding '{encoding}' are not accepted: send the body "
        "uncompressed (identity)"
    )
    await _answer(scope, send, 415, detail, [(b"accept-encoding", b"identity")])


async def _answer(
    scope: Scope,
    send: Send,
    status: int,
    detail: str,
    extra: list[tuple[bytes, bytes]] | None = None,
    close: bool = True,
) -> None:
    body: Any = dumps(error_body(scope.get("path", ""), status, detail))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *([(b"connection", b"close")] if close else []),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


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


def set_nodelay(transport: Any) -> None:
    """Disable Nagle on the connection of an asyncio transport (``None``: nothing is done)."""
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
            # uvicorn passes the bound ``send`` of its per-request cycle object, which holds
            # the connection's transport. Other servers: nothing (they manage their sockets).
            set_nodelay(getattr(getattr(send, "__self__", None), "transport", None))
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
