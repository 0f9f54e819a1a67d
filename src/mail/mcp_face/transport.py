"""``/mcp`` on the FastAPI app: bearer auth, one caller per session, the SDK's transport."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Message, Receive, Scope, Send

from mail.mcp_face.face import Face
from mail.mcp_face.sessions import SessionShares, TooManySessions

logger = logging.getLogger("mail.mcp")
SESSION_HEADER = b"mcp-session-id"


class McpEndpoint:
    """The ASGI app behind the ``/mcp`` route."""

    def __init__(self, face: Face, max_body: int) -> None:
        self.face = face
        face.server.streamable_http_app(
            max_request_body_size=max_body,
            session_idle_timeout=face.settings.session_idle_timeout,
            max_sessions=face.settings.max_sessions,
            # Every request carries a bearer key, which a rebinding page does not have.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.sessions = face.server.session_manager
        self.shares = SessionShares(
            self.sessions,
            per_caller=face.settings.max_sessions_per_caller,
            server_wide=face.settings.max_sessions,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.sessions.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        try:
            caller = await self._caller(headers.get(b"authorization", b"").decode("latin-1"))
        except HTTPException as exc:
            await _error(send, exc.status_code, str(exc.detail), exc.headers)
            return
        owner = (caller.role, caller.id)
        session = headers.get(SESSION_HEADER, b"").decode("latin-1")
        if session:
            known = self.shares.owner_of(session)
            if known is not None and known != owner:
                await _error(send, 404, "Session not found")
                return
            self.shares.started(session)
            try:
                await self.sessions.handle_request(scope, receive, send)
            finally:
                self.shares.finished(session)
            if scope.get("method") == "DELETE":
                self.shares.closed(session)
            return
        try:
            await self.shares.admit(owner)
        except TooManySessions as exc:
            await _error(send, 429, str(exc), {"Retry-After": "30"})
            return

        async def send_and_record(message: Message) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers") or []:
                    if key.lower() == SESSION_HEADER:
                        self.shares.opened(value.decode("latin-1"), owner)
            await send(message)

        try:
            await self.sessions.handle_request(scope, receive, send_and_record)
        finally:
            self.shares.done_opening(owner)

    async def _caller(self, header: str) -> Any:
        from mail.server.auth import BAD_KEY_FORMAT, unauthorized

        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise unauthorized("no API key provided" if not header else BAD_KEY_FORMAT)
        return await self.face.state.auth.authenticate(key.strip())


async def _error(send: Send, status: int, detail: str, headers: Any = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
