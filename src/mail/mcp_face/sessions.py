"""Who holds which MCP session, and room for a new one: a share per caller, idle ones first."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("mail.mcp")

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
