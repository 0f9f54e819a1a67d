"""``/mcp`` on the FastAPI app: bearer auth, one caller per session, the SDK's transport."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Message, Receive, Scope, Send

from mail.mcp_face.face import Face

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


Owner = tuple[str, str]  # (role, caller id)


class TooManySessions(Exception):
    """The caller already uses its whole share of sessions."""


@dataclass
class _Use:
    owner: Owner
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)


class _SdkSessions:
    """The SDK session manager's open sessions, and ending one (as an idle timeout does)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    def open_ids(self) -> set[str]:
        return set(getattr(self.manager, "_server_instances", {}))

    async def end(self, session_id: str) -> None:
        transport = getattr(self.manager, "_server_instances", {}).get(session_id)
        if transport is None:
            return
        discard = getattr(self.manager, "_discard_session", None)
        if discard is not None:
            await discard(session_id, transport)  # forgotten at once, then terminated
        else:  # pragma: no cover - an SDK without it: the session's task discards it
            await transport.terminate()


class SessionShares:
    """Who holds which MCP session, and room for a new one: a share per caller, idle ones first."""

    def __init__(self, manager: Any, *, per_caller: int, server_wide: int) -> None:
        self.sdk = _SdkSessions(manager)
        self.per_caller = per_caller
        self.server_wide = server_wide
        self.uses: dict[str, _Use] = {}  # session id -> its owner and use
        self._opening: dict[Owner, int] = {}  # new sessions being opened, per owner

    # -- what the endpoint reports -------------------------------------------------------
    def owner_of(self, session_id: str) -> Owner | None:
        use = self.uses.get(session_id)
        return use.owner if use is not None else None

    def opened(self, session_id: str, owner: Owner) -> None:
        self.uses.setdefault(session_id, _Use(owner))

    def started(self, session_id: str) -> None:
        use = self.uses.get(session_id)
        if use is not None:
            use.in_flight += 1
            use.last_used = time.monotonic()

    def finished(self, session_id: str) -> None:
        use = self.uses.get(session_id)
        if use is not None:
            use.in_flight = max(0, use.in_flight - 1)
            use.last_used = time.monotonic()

    def closed(self, session_id: str) -> None:
        self.uses.pop(session_id, None)

    # -- admission -----------------------------------------------------------------------
    async def admit(self, owner: Owner) -> None:
        """Make room for one more session of `owner` (TooManySessions if it cannot have
        one); pair with `done_opening` once the opening request was answered."""
        self._forget_ended()
        mine = [sid for sid, use in self.uses.items() if use.owner == owner]
        if len(mine) + self._opening.get(owner, 0) >= self.per_caller:
            idle = self._idlest(mine)
            if idle is None:
                raise TooManySessions(
                    f"{len(mine)} MCP sessions of this key are open and in use; the limit "
                    f"is {self.per_caller} ([server.mcp] max_sessions_per_caller). Close one "
                    "(DELETE /mcp with its Mcp-Session-Id) or try again later"
                )
            await self._end(idle, "it was this caller's idlest at its share")
        elif len(self.sdk.open_ids()) + sum(self._opening.values()) >= self.server_wide:
            idle = self._idlest_of_the_largest_holder()
            if idle is not None:
                await self._end(idle, "the server is at [server.mcp] max_sessions")
        self._opening[owner] = self._opening.get(owner, 0) + 1

    def done_opening(self, owner: Owner) -> None:
        left = self._opening.get(owner, 0) - 1
        if left > 0:
            self._opening[owner] = left
        else:
            self._opening.pop(owner, None)

    def _forget_ended(self) -> None:
        """Sessions the SDK ended by itself (idle timeout, DELETE, a crash) are not held."""
        open_ids = self.sdk.open_ids()
        for sid in [sid for sid in self.uses if sid not in open_ids]:
            del self.uses[sid]

    def _idlest(self, session_ids: list[str]) -> str | None:
        idle = [sid for sid in session_ids if self.uses[sid].in_flight == 0]
        return min(idle, key=lambda sid: self.uses[sid].last_used) if idle else None

    def _idlest_of_the_largest_holder(self) -> str | None:
        held: dict[Owner, list[str]] = {}
        for sid, use in self.uses.items():
            held.setdefault(use.owner, []).append(sid)
        for _owner, sids in sorted(held.items(), key=lambda item: -len(item[1])):
            idle = self._idlest(sids)
            if idle is not None:
                return idle
        return None

    async def _end(self, session_id: str, why: str) -> None:
        use = self.uses.pop(session_id, None)
        who = f"{use.owner[0]}:{use.owner[1]}" if use is not None else "?"
        logger.info("MCP session %s… of %s ended to make room (%s)", session_id[:8], who, why)
        await self.sdk.end(session_id)
