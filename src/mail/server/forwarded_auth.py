"""Authentication inside an instance host: the front end already checked the key."""

from __future__ import annotations

from mail.server.auth import Caller, unauthorized


class ForwardedAuthenticator:
    mode = "forwarded"

    def __init__(self) -> None:
        self._callers: dict[str, Caller] = {}

    def remember(self, caller: Caller) -> None:
        self._callers[caller.api_key] = caller

    async def authenticate(self, api_key: str) -> Caller:
        caller = self._callers.get(api_key)
        if caller is None:
            raise unauthorized("invalid API key")
        return caller

    async def aclose(self) -> None:
        self._callers.clear()
