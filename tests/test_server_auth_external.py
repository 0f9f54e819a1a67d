"""End-to-end: a real `mail server` in external auth mode, counting round trips to the service."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from server_fixtures import StubAuthService, auth, running_server, write_config, write_stub_swarms

pytestmark = pytest.mark.timeout(90)

USERS = {"ext-admin": ("admin", "boss"), "ext-user": ("user", "uma"), "ext-agent": ("agent", "far")}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("extauth")
    write_stub_swarms(directory)
    config = write_config(directory, port=0, extra="[server.auth]\ntoken_cache_ttl = 60\n")
    with StubAuthService(USERS) as service:
        with running_server(directory, ["--config", str(config)], env=service.env) as server:
            yield server, service


def test_local_key_file_is_not_used_or_created(setup) -> None:
    server, _ = setup
    assert not (server.directory / "registries" / "keys.json").exists()
    assert "No API keys were found" not in server.logs()


def test_each_request_costs_at_most_one_round_trip_and_cached_keys_none(setup) -> None:
    server, service = setup
    service.reset_counts()
    r = httpx.get(f"{server.base_url}/whoami", headers=auth("ext-user"))
    assert r.json() == {"id": "uma", "role": "user", "username": "uma"}
    assert (service.login_calls, service.token_info_calls) == (1, 1)
    # An admin-or-user route with a full message exchange: no further auth traffic.
    r = httpx.post(
        f"{server.base_url}/message", headers=auth("ext-user"), json={"body": "hi"}, timeout=30
    )
    assert r.json()["response"] == "echo[uma]: hi"
    for path in ("/status", "/tasks", "/whoami"):
        assert httpx.get(server.base_url + path, headers=auth("ext-user")).status_code == 200
    assert (service.login_calls, service.token_info_calls) == (1, 1)


def test_concurrent_first_requests_share_one_lookup(setup) -> None:
    server, service = setup
    service.reset_counts()
    service.delay = 0.2

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            replies = await asyncio.gather(
                *(client.get("/whoami", headers=auth("ext-admin")) for _ in range(8))
            )
            return [r.status_code for r in replies]

    try:
        assert asyncio.run(burst()) == [200] * 8
    finally:
        service.delay = 0.0
    assert (service.login_calls, service.token_info_calls) == (1, 1)


def test_roles_and_errors_in_external_mode(setup) -> None:
    server, service = setup
    r = httpx.post(f"{server.base_url}/health", headers=auth("ext-user"), json={"status": "x"})
    assert r.status_code == 403 and r.json()["detail"] == "invalid role"
    r = httpx.post(
        f"{server.base_url}/health", headers=auth("ext-admin"), json={"status": "healthy"}
    )
    assert r.status_code == 200
    assert httpx.get(f"{server.base_url}/whoami", headers=auth("ext-agent")).status_code == 403
    service.reset_counts()
    r = httpx.get(f"{server.base_url}/whoami", headers=auth("unknown-key"))
    assert r.status_code == 401 and r.json()["detail"] == "invalid API key"
    assert (service.login_calls, service.token_info_calls) == (1, 0)
    assert httpx.get(f"{server.base_url}/whoami").status_code == 401
    assert service.login_calls == 1  # a missing header never reaches the service
