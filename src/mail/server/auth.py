"""Bearer-key authentication for the HTTP server, in two modes."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import HTTPException, Request

from mail.server.keystore import ROLES, LocalKeyStore

if TYPE_CHECKING:
    from mail.config import ServerConfig

logger = logging.getLogger("mail.auth")

AUTH_ENDPOINT_VAR = "AUTH_ENDPOINT"
TOKEN_INFO_ENDPOINT_VAR = "TOKEN_INFO_ENDPOINT"
_CACHE_MAX_ENTRIES = 10_000
# The most of an auth service's reply that is read: a token, or a token's role and id.
MAX_AUTH_REPLY_BYTES = 64 * 1024
_BEARER_CHALLENGE = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated party. ``api_key`` is the key instances are created with."""

    role: str
    id: str
    api_key: str
    # Agent keys made with `mail keys create --swarm NAME` speak only for that swarm.
    swarm: str | None = None

    def token_info(self) -> dict[str, str]:
        """The original's token-info dict shape."""
        return {"role": self.role, "id": self.id, "api_key": self.api_key}


# The 401 for an Authorization header that is not `Bearer <key>` (v1.3 said only the first
# four words; the rest says what to send).
BAD_KEY_FORMAT = "invalid API key format: send the header 'Authorization: Bearer <key>'"


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail, headers=_BEARER_CHALLENGE)


class Authenticator(Protocol):
    mode: str

    async def authenticate(self, api_key: str) -> Caller: ...

    async def aclose(self) -> None: ...


class LocalAuthenticator:
    """Checks keys against the hashed local key file."""

    mode = "local"

    def __init__(self, keys_file: Path) -> None:
        self.store = LocalKeyStore(keys_file)

    async def authenticate(self, api_key: str) -> Caller:
        record = self.store.lookup(api_key)
        if record is None:
            raise unauthorized("invalid API key")
        return Caller(role=record.role, id=record.id, api_key=api_key, swarm=record.swarm)

    async def aclose(self) -> None:
        return None


class ExternalAuthenticator:
    """Delegates to an auth service; results cached per key with single-flight lookups."""

    mode = "external"

    def __init__(
        self,
        auth_endpoint: str,
        token_info_endpoint: str,
        *,
        ttl: float = 60.0,
        timeout: float = 10.0,
    ) -> None:
        self.auth_endpoint = auth_endpoint
        self.token_info_endpoint = token_info_endpoint
        self.ttl = ttl
        self.timeout = timeout
        self._cache: dict[str, tuple[float, Caller]] = {}
        self._inflight: dict[str, asyncio.Task[Caller]] = {}
        # Round trips made so far (exposed for tests and diagnostics).
        self.login_calls = 0
        self.token_info_calls = 0

    async def _ask(
        self, method: str, url: str, credential: str, *, what: str, refused: str, failed: str
    ) -> Any:
        """Send `credential` to the auth service at `url`: the JSON of its 200 reply, else 401
        with `refused` (the service said 401) or 500 with `failed` (unreachable, another
        status, a reply that is not JSON or is over MAX_AUTH_REPLY_BYTES)."""
        import aiohttp

        from mail.net.answers import AnswerTooLarge, read_capped

        # A session per call (0.1 ms): lookups are rare (cached per key), and a session kept
        # would be tied to one event loop (`mail.utils.auth.login` runs in a caller's loops).
        # trust_env: HTTP(S)_PROXY and NO_PROXY apply, as they did with httpx.
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=True) as session,
                session.request(
                    method, url, headers={"Authorization": f"Bearer {credential}"}
                ) as reply,
            ):
                status = reply.status
                body = await read_capped(reply, MAX_AUTH_REPLY_BYTES) if status == 200 else b""
        except AnswerTooLarge as exc:
            logger.error("auth service's reply to %s: %s", what, exc)
            raise HTTPException(500, failed) from exc
        except Exception as exc:
            logger.error("auth service unreachable at %s: %s", url, exc or type(exc).__name__)
            raise HTTPException(500, failed) from exc
        if status == 401:
            raise unauthorized(refused)
        if status != 200:
            logger.error("auth service replied %s to %s", status, what)
            raise HTTPException(500, failed)
        try:
            return json.loads(body)
        except ValueError as exc:
            logger.error("auth service's reply to %s is not JSON", what)
            raise HTTPException(500, failed) from exc

    async def login(self, api_key: str) -> str:
        """Exchange an API key for a token at ``AUTH_ENDPOINT``."""
        self.login_calls += 1
        failed = "failed to authenticate user or agent with API key"
        reply = await self._ask(
            "POST",
            self.auth_endpoint,
            api_key,
            what="login",
            refused="invalid API key",
            failed=failed,
        )
        token = reply.get("token") if isinstance(reply, dict) else None
        if token is None:
            logger.error("auth service login reply has no 'token' field")
            raise HTTPException(500, failed)
        return str(token)

    async def get_token_info(self, token: str) -> dict[str, Any]:
        """Describe a token via ``TOKEN_INFO_ENDPOINT``: ``{"role", "id", "api_key"}``."""
        self.token_info_calls += 1
        info = await self._ask(
            "GET",
            self.token_info_endpoint,
            token,
            what="token info",
            refused="invalid token",
            failed="failed to get token info",
        )
        if not isinstance(info, dict) or info.get("role") not in ROLES or not info.get("id"):
            logger.error("auth service returned malformed token info (role/id missing or unknown)")
            raise HTTPException(500, "failed to get token info")
        return info

    async def _lookup(self, api_key: str) -> Caller:
        token = await self.login(api_key)
        info = await self.get_token_info(token)
        return Caller(
            role=str(info["role"]), id=str(info["id"]), api_key=str(info.get("api_key") or api_key)
        )

    def _finish(self, api_key: str, task: asyncio.Task[Caller]) -> None:
        self._inflight.pop(api_key, None)
        if task.cancelled():
            return
        if task.exception() is not None:  # also marks the exception as retrieved
            return
        if self.ttl > 0:
            if len(self._cache) >= _CACHE_MAX_ENTRIES:
                now = time.monotonic()
                for key in [k for k, (exp, _) in self._cache.items() if exp <= now]:
                    del self._cache[key]
                if len(self._cache) >= _CACHE_MAX_ENTRIES:
                    self._cache.clear()
            self._cache[api_key] = (time.monotonic() + self.ttl, task.result())

    async def authenticate(self, api_key: str) -> Caller:
        hit = self._cache.get(api_key)
        if hit is not None:
            if hit[0] > time.monotonic():
                return hit[1]
            del self._cache[api_key]
        task = self._inflight.get(api_key)
        if task is None:
            # The lookup runs as its own task so that a client that disconnects mid-lookup
            # doesn't fail the other requests waiting on the same key.
            task = asyncio.create_task(self._lookup(api_key))
            self._inflight[api_key] = task
            task.add_done_callback(functools.partial(self._finish, api_key))
        return await asyncio.shield(task)

    async def aclose(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()


class AuthConfigError(ValueError):
    """The auth settings can't work (e.g. only one of the two endpoints is set)."""


def external_endpoints() -> tuple[str | None, str | None]:
    return os.environ.get(AUTH_ENDPOINT_VAR) or None, os.environ.get(
        TOKEN_INFO_ENDPOINT_VAR
    ) or None


def resolve_auth_mode(config: ServerConfig) -> str:
    """``local`` or ``external`` according to ``[server.auth].mode`` and the environment."""
    auth_ep, info_ep = external_endpoints()
    mode = config.auth.mode
    if mode == "local":
        return "local"
    if auth_ep and info_ep:
        return "external"
    if mode == "external" or auth_ep or info_ep:
        missing = TOKEN_INFO_ENDPOINT_VAR if auth_ep else AUTH_ENDPOINT_VAR
        if not auth_ep and not info_ep:
            missing = f"{AUTH_ENDPOINT_VAR} and {TOKEN_INFO_ENDPOINT_VAR}"
        raise AuthConfigError(f"external auth needs {missing} to be set")
    return "local"


def build_authenticator(config: ServerConfig) -> Authenticator:
    if resolve_auth_mode(config) == "external":
        auth_ep, info_ep = external_endpoints()
        assert auth_ep and info_ep
        logger.info(
            "auth: external service (%s, %s), cache ttl %.0fs",
            auth_ep,
            info_ep,
            config.auth.token_cache_ttl,
        )
        return ExternalAuthenticator(
            auth_ep, info_ep, ttl=config.auth.token_cache_ttl, timeout=config.auth.request_timeout
        )
    path = config.keys_file_path()
    logger.info("auth: local key file %s", path)
    return LocalAuthenticator(path)


# ----------------------------------------------------------------------------------------------
# FastAPI dependencies


def bearer_key(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise unauthorized("no API key provided")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise unauthorized(BAD_KEY_FORMAT)
    return key


def server_state(request: Request) -> Any:
    """The app's ``state.mail`` (the server's state), or None. Read from the dict behind
    Starlette's `State` when there is one: ``state.mail`` raises and catches an
    AttributeError inside `State` on every call before it finds the attribute."""
    box = request.app.state
    values = getattr(box, "_state", None)
    return values.get("mail") if isinstance(values, dict) else getattr(box, "mail", None)


def request_authenticator(request: Request) -> Authenticator:
    auth = getattr(server_state(request), "auth", None)
    if auth is None:
        raise HTTPException(503, "authentication is not configured")
    return auth


async def authenticate_request(
    request: Request, authenticator: Authenticator | None = None
) -> Caller:
    """The caller behind the request's bearer key (memoised on the request), as
    `authenticator` (default: the server's) sees it."""
    # The dict behind `request.state` (Starlette keeps it in the scope), read directly: a
    # `State` attribute it lacks raises and catches an AttributeError on every request.
    memo: dict[str, Any] = request.scope.setdefault("state", {})
    cached: Caller | None = memo.get("mail_caller")
    if cached is not None:
        return cached
    auth = authenticator if authenticator is not None else request_authenticator(request)
    caller = await auth.authenticate(bearer_key(request))
    memo["mail_caller"] = caller
    return caller


def require_roles(*roles: str):  # noqa: ANN201 - returns a FastAPI dependency
    allowed = frozenset(roles)

    async def dependency(request: Request) -> Caller:
        caller = await authenticate_request(request)
        if caller.role not in allowed:
            raise HTTPException(403, "invalid role")
        return caller

    dependency.__name__ = "caller_is_" + "_or_".join(roles)
    return dependency


caller_admin = require_roles("admin")
caller_agent = require_roles("agent")
caller_admin_or_user = require_roles("admin", "user")


class ForwardedAuthenticator:
    """Authentication inside an instance host: the front end already checked the key."""

    mode = "forwarded"

    def __init__(self) -> None:
        self._callers: dict[str, Caller] = {}

    def remember(self, caller: Caller) -> None:
        if caller.api_key:  # (a host started to continue tasks has no key: see ray_backend)
            self._callers[caller.api_key] = caller

    async def authenticate(self, api_key: str) -> Caller:
        caller = self._callers.get(api_key)
        if caller is None:
            raise unauthorized("invalid API key")
        return caller

    async def aclose(self) -> None:
        self._callers.clear()
