"""Authentication helpers with the original's names (compatibility layer)."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request

from mail.server.auth import (
    BAD_KEY_FORMAT,
    Authenticator,
    Caller,
    ExternalAuthenticator,
    authenticate_request,
    build_authenticator,
)

__all__ = [
    "caller_is_admin",
    "extract_token",
    "require_debug",
    "caller_is_admin_or_user",
    "caller_is_agent",
    "caller_is_user",
    "extract_token_info",
    "generate_agent_id",
    "generate_user_id",
    "get_token_info",
    "login",
]

_fallback: Authenticator | None = None


def _default_authenticator() -> Authenticator:
    global _fallback
    if _fallback is None:
        from mail.config import load_config

        _fallback = build_authenticator(load_config().server)
    return _fallback


def _authenticator_for(request: Request | None) -> Authenticator:
    if request is not None:
        state = getattr(request.app.state, "mail", None)
        auth = getattr(state, "auth", None)
        if auth is not None:
            return auth
    return _default_authenticator()


async def login(api_key: str) -> str:
    """Exchange an API key for a bearer token (local mode: the key is its own token)."""
    auth = _default_authenticator()
    if isinstance(auth, ExternalAuthenticator):
        return await auth.login(api_key)
    await auth.authenticate(api_key)  # raises 401 for an unknown key
    return api_key


async def get_token_info(token: str) -> dict[str, Any]:
    """``{"role", "id", "api_key"}`` for a token from :func:`login`."""
    auth = _default_authenticator()
    if isinstance(auth, ExternalAuthenticator):
        return await auth.get_token_info(token)
    return (await auth.authenticate(token)).token_info()


async def _caller(request: Request) -> Caller:
    return await authenticate_request(request, _authenticator_for(request))


async def _require(request: Request, roles: tuple[str, ...]) -> bool:
    caller = await _caller(request)
    if caller.role not in roles:
        raise HTTPException(403, "invalid role")
    return True


async def caller_is_admin(request: Request) -> bool:
    return await _require(request, ("admin",))


async def caller_is_user(request: Request) -> bool:
    return await _require(request, ("user",))


async def caller_is_agent(request: Request) -> bool:
    return await _require(request, ("agent",))


async def caller_is_admin_or_user(request: Request) -> bool:
    return await _require(request, ("admin", "user"))


async def extract_token_info(request: Request) -> dict[str, Any]:
    """The caller's token info, from the request's bearer key."""
    return (await _caller(request)).token_info()


def generate_user_id(token_info: dict[str, Any]) -> str:
    """Composite id of an admin/user caller: ``{role}_{id}``."""
    return f"{token_info['role']}_{token_info['id']}"


def generate_agent_id(token_info: dict[str, Any]) -> str:
    """Composite id of a remote swarm caller: ``swarm_{id}``."""
    return f"swarm_{token_info['id']}"


def extract_token(request: Request) -> str:
    """The bearer token of `request`; 401 ``invalid API key format: ...`` without one."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme != "Bearer" or not token.strip():
        raise HTTPException(status_code=401, detail=BAD_KEY_FORMAT)
    return token.strip()


def require_debug(request: Request) -> None:
    """404 unless the server runs in debug mode (``[server].debug``, ``mail server --debug``)."""
    config = getattr(request.app.state, "config", None)
    if not getattr(config, "debug", False):
        raise HTTPException(status_code=404, detail="Not found")
