"""A limit on the size of request bodies, enforced while the body is read."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mail.server.jsonio import dumps


def too_large_detail(limit: int) -> str:
    return (
        f"request body too large: the limit is {limit} bytes ([server.settings] max_request_body)"
    )


class RequestBodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_detail(limit))


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
            await _refuse_encoding(send, encoding)
            return
        if self.limit <= 0:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _reject(send, self.limit)
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


async def _reject(send: Send, limit: int) -> None:
    await _answer(send, 413, too_large_detail(limit))


async def _refuse_encoding(send: Send, encoding: str) -> None:
    detail = (
        f"request bodies with Content-Encoding '{encoding}' are not accepted: send the body "
        "uncompressed (identity)"
    )
    await _answer(send, 415, detail, [(b"accept-encoding", b"identity")])


async def _answer(
    send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body: Any = dumps({"detail": detail})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
