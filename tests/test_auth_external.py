"""ExternalAuthenticator against a stub auth service on loopback: contract, cache, single-flight."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import HTTPException

from mail.config import ServerConfig
from mail.server.auth import (
    AuthConfigError,
    ExternalAuthenticator,
    LocalAuthenticator,
    build_authenticator,
    resolve_auth_mode,
)
from server_fixtures import StubAuthService

pytestmark = pytest.mark.timeout(30)

USERS = {"key-admin": ("admin", "a1"), "key-user": ("user", "u1"), "key-agent": ("agent", "peer")}


@pytest.fixture
def service():
    with StubAuthService(USERS) as svc:
        yield svc


def authenticator(service: StubAuthService, ttl: float = 60.0) -> ExternalAuthenticator:
    return ExternalAuthenticator(
        service.env["AUTH_ENDPOINT"], service.env["TOKEN_INFO_ENDPOINT"], ttl=ttl
    )


async def test_login_and_token_info_contract(service: StubAuthService) -> None:
    auth = authenticator(service)
    try:
        caller = await auth.authenticate("key-user")
        assert (caller.role, caller.id, caller.api_key) == ("user", "u1", "key-user")
        assert caller.token_info() == {"role": "user", "id": "u1", "api_key": "key-user"}
        assert (service.login_calls, service.token_info_calls) == (1, 1)
        assert await auth.login("key-agent") == "tok-key-agent"
        assert (await auth.get_token_info("tok-key-agent"))["role"] == "agent"
    finally:
        await auth.aclose()


async def test_cache_makes_repeat_requests_free_until_ttl(service: StubAuthService) -> None:
    auth = authenticator(service, ttl=0.3)
    try:
        for _ in range(5):
            await auth.authenticate("key-admin")
        assert (service.login_calls, service.token_info_calls) == (1, 1)
        await asyncio.sleep(0.35)
        await auth.authenticate("key-admin")
        assert (service.login_calls, service.token_info_calls) == (2, 2)
    finally:
        await auth.aclose()


async def test_concurrent_requests_with_one_key_share_one_lookup(service: StubAuthService) -> None:
    service.delay = 0.1
    auth = authenticator(service)
    try:
        callers = await asyncio.gather(*(auth.authenticate("key-user") for _ in range(10)))
        assert {c.id for c in callers} == {"u1"}
        assert (service.login_calls, service.token_info_calls) == (1, 1)
        await asyncio.gather(auth.authenticate("key-admin"), auth.authenticate("key-agent"))
        assert (service.login_calls, service.token_info_calls) == (3, 3)
    finally:
        await auth.aclose()


async def test_cancelled_waiter_does_not_break_the_shared_lookup(service: StubAuthService) -> None:
    service.delay = 0.2
    auth = authenticator(service)
    try:
        first = asyncio.create_task(auth.authenticate("key-user"))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(auth.authenticate("key-user"))
        await asyncio.sleep(0.01)
        first.cancel()
        assert (await second).id == "u1"
        assert service.login_calls == 1
    finally:
        await auth.aclose()


async def test_error_mapping(service: StubAuthService) -> None:
    auth = authenticator(service)
    try:
        with pytest.raises(HTTPException) as bad_key:
            await auth.authenticate("nope")
        assert (bad_key.value.status_code, bad_key.value.detail) == (401, "invalid API key")
        with pytest.raises(HTTPException) as bad_token:
            await auth.get_token_info("tok-nope")
        assert (bad_token.value.status_code, bad_token.value.detail) == (401, "invalid token")
        service.fail_with = 503
        with pytest.raises(HTTPException) as down:
            await auth.authenticate("key-agent")
        assert down.value.status_code == 500
        assert down.value.detail == "failed to authenticate user or agent with API key"
        # Failures are not cached: once the service recovers the key works.
        service.fail_with = None
        assert (await auth.authenticate("key-agent")).id == "peer"
    finally:
        await auth.aclose()


async def test_unreachable_service_is_a_500_not_a_hang() -> None:
    auth = ExternalAuthenticator("http://127.0.0.1:9/login", "http://127.0.0.1:9/info", timeout=2)
    try:
        with pytest.raises(HTTPException) as exc:
            await auth.authenticate("k")
        assert exc.value.status_code == 500
    finally:
        await auth.aclose()


def test_mode_selection(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    cfg = ServerConfig.model_validate({"auth": {"keys_file": str(tmp_path / "k.json")}})
    monkeypatch.delenv("AUTH_ENDPOINT", raising=False)
    monkeypatch.delenv("TOKEN_INFO_ENDPOINT", raising=False)
    assert resolve_auth_mode(cfg) == "local"
    assert isinstance(build_authenticator(cfg), LocalAuthenticator)
    monkeypatch.setenv("AUTH_ENDPOINT", "http://a/login")
    with pytest.raises(AuthConfigError, match="TOKEN_INFO_ENDPOINT"):
        resolve_auth_mode(cfg)
    monkeypatch.setenv("TOKEN_INFO_ENDPOINT", "http://a/info")
    assert resolve_auth_mode(cfg) == "external"
    assert isinstance(build_authenticator(cfg), ExternalAuthenticator)
    forced_local = cfg.model_copy(update={"auth": cfg.auth.model_copy(update={"mode": "local"})})
    assert resolve_auth_mode(forced_local) == "local"
    monkeypatch.delenv("AUTH_ENDPOINT")
    monkeypatch.delenv("TOKEN_INFO_ENDPOINT")
    forced_external = cfg.model_copy(
        update={"auth": cfg.auth.model_copy(update={"mode": "external"})}
    )
    with pytest.raises(AuthConfigError, match="AUTH_ENDPOINT and TOKEN_INFO_ENDPOINT"):
        resolve_auth_mode(forced_external)
