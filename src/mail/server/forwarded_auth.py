"""Authentication inside an instance host: the front end already checked the key.

A cluster front end authenticates every request before it forwards it; the host that runs the
caller's instance accepts exactly the (key, caller) pairs the front end handed it, and no other
key. Routes, role checks and error bodies are the same code as in a single process.
"""

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
