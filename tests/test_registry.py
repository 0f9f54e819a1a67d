"""SwarmRegistry against real loopback HTTP servers (aiohttp.web on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import socket
import stat
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mail.net import InterswarmError, SwarmRegistry, registry_store
from mail.net.registry_store import parse_env_ref, resolve_token_ref, token_env_var

pytestmark = pytest.mark.timeout(30)

BETA_VAR = "SWARM_AUTH_TOKEN_SWARM_BETA"
CLEANED_FIELDS = {
    "swarm_name",
    "base_url",
    "version",
    "last_seen",
    "is_active",
    "latency",
    "swarm_description",
    "keywords",
    "metadata",
}


class FakeSwarm:
    """A minimal MAIL server: GET /, GET /health, GET /swarms. Restartable on its port."""

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        keywords: list[str] | None = None,
        public: bool = True,
        root: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.root = root or {
            "name": "mail",
            "status": "running",
            "protocol_version": "1.3",
            "swarm": {
                "name": name,
                "version": "1.0.0",
                "description": description,
                "entrypoint": "supervisor",
                "keywords": keywords or [],
                "public": public,
            },
            "uptime": 1.0,
        }
        self.health_status = 200
        self.health_hits = 0
        self.swarm_list: Any = {"swarms": []}
        self.port: int | None = None
        self._server: TestServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _app(self) -> web.Application:
        async def root(_: web.Request) -> web.Response:
            return web.json_response(self.root)

        async def health(_: web.Request) -> web.Response:
            self.health_hits += 1
            return web.json_response(
                {"status": "ok", "swarm_name": self.name}, status=self.health_status
            )

        async def swarms(_: web.Request) -> web.Response:
            return web.json_response(self.swarm_list)

        app = web.Application()
        app.router.add_get("/", root)
        app.router.add_get("/health", health)
        app.router.add_get("/swarms", swarms)
        return app

    async def start(self) -> None:
        self._server = TestServer(self._app(), host="127.0.0.1", port=self.port)
        await self._server.start_server()
        self.port = self._server.port

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.close()
            self._server = None


@pytest.fixture
async def remotes() -> AsyncIterator[Callable[..., Any]]:
    started: list[FakeSwarm] = []

    async def make(name: str, **kwargs: Any) -> FakeSwarm:
        remote = FakeSwarm(name, **kwargs)
        await remote.start()
        started.append(remote)
        return remote

    yield make
    for remote in started:
        await remote.stop()


@pytest.fixture
def registry_file(tmp_path: Path) -> Path:
    # A folder that does not exist yet: the registry must create it.
    return tmp_path / "registries" / "swarm-alpha.json"


@pytest.fixture
async def registries(registry_file: Path) -> AsyncIterator[Callable[..., SwarmRegistry]]:
    made: list[SwarmRegistry] = []

    def make(**kwargs: Any) -> SwarmRegistry:
        kwargs.setdefault("persistence_file", registry_file)
        registry = SwarmRegistry("swarm-alpha", "http://127.0.0.1:1", **kwargs)
        made.append(registry)
        return registry

    yield make
    for registry in made:
        await registry.aclose()


@pytest.fixture(autouse=True)
def _no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("SWARM_AUTH_TOKEN") or var.startswith("MY_TOKENS"):
            monkeypatch.delenv(var)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def read_file(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# --------------------------------------------------------------------------- token refs


def test_token_env_var_names() -> None:
    assert token_env_var("swarm-beta") == BETA_VAR
    assert token_env_var("my.swarm", prefix="MY_TOKENS") == "MY_TOKENS_MY_SWARM"
    assert parse_env_ref("${SWARM_AUTH_TOKEN_X}") == "SWARM_AUTH_TOKEN_X"
    assert parse_env_ref("plain-token") is None


def test_resolve_token_ref(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_token_ref("${SWARM_AUTH_TOKEN_X}") is None
    monkeypatch.setenv("SWARM_AUTH_TOKEN_X", "from-env")
    assert resolve_token_ref("${SWARM_AUTH_TOKEN_X}") == "from-env"
    assert resolve_token_ref("literal") == "literal"
    assert resolve_token_ref(None) is None


# --------------------------------------------------------------------------- registration


async def test_local_swarm_registered_at_init(registries: Callable[..., SwarmRegistry]) -> None:
    registry = registries(local_swarm_description="alpha swarm", local_swarm_public=True)
    local = registry.get_swarm_endpoint("swarm-alpha")
    assert local is not None
    assert local["version"] == "1.3"
    assert local["health_check_url"] == "http://127.0.0.1:1/health"
    assert local["auth_token_ref"] is None
    assert local["is_active"] and not local["volatile"] and local["public"]
    assert local["swarm_description"] == "alpha swarm"


async def test_register_fetches_remote_metadata(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta", description="weather", keywords=["forecast"], public=True)
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url + "/", metadata={"team": "b"})
    endpoint = registry.get_swarm_endpoint("swarm-beta")
    assert endpoint is not None
    assert endpoint["base_url"] == beta.url
    assert endpoint["health_check_url"] == f"{beta.url}/health"
    assert endpoint["version"] == "1.3"
    assert endpoint["swarm_description"] == "weather"
    assert endpoint["keywords"] == ["forecast"]
    assert endpoint["public"] is True
    assert endpoint["metadata"] == {"team": "b"}
    assert endpoint["volatile"] is True
    assert endpoint["is_active"] is True
    assert isinstance(endpoint["last_seen"], datetime.datetime)
    assert isinstance(endpoint["latency"], float) and 0 <= endpoint["latency"] < 5


async def test_register_accepts_openapi_root_shape(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes(
        "swarm-beta",
        root={"name": "mail", "version": "1.3", "swarm": "swarm-beta", "status": "running"},
    )
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url)
    endpoint = registry.get_swarm_endpoint("swarm-beta")
    assert endpoint is not None
    assert endpoint["version"] == "1.3"
    assert endpoint["public"] is False


async def test_register_unreachable_remote_raises(registries: Callable[..., SwarmRegistry]) -> None:
    registry = registries()
    port = closed_port()
    with pytest.raises(InterswarmError) as info:
        await registry.register_swarm("swarm-beta", f"http://127.0.0.1:{port}")
    assert str(info.value).startswith(
        f"failed to get remote swarm info from http://127.0.0.1:{port}/"
    )
    assert registry.get_swarm_endpoint("swarm-beta") is None


async def test_register_rejects_bad_input(registries: Callable[..., SwarmRegistry]) -> None:
    registry = registries()
    with pytest.raises(ValueError, match="invalid swarm name"):
        await registry.register_swarm("worker@beta", "http://127.0.0.1:1")
    with pytest.raises(ValueError, match="base_url"):
        await registry.register_swarm("swarm-beta", "ftp://example")


async def test_register_local_name_is_refused(
    registries: Callable[..., SwarmRegistry], registry_file: Path
) -> None:
    registry = registries()
    with pytest.raises(ValueError, match="is the name of this swarm"):
        await registry.register_swarm("swarm-alpha", "http://127.0.0.1:2", volatile=False)
    endpoint = registry.get_swarm_endpoint("swarm-alpha")
    assert endpoint is not None and endpoint["base_url"] == "http://127.0.0.1:1"


async def test_register_refuses_base_url_with_query_fragment_or_credentials(
    registries: Callable[..., SwarmRegistry],
) -> None:
    # A path prefix is fine (tests/test_interswarm_peers.py runs one behind a real proxy);
    # these are not, and nothing is contacted for them.
    registry = registries()
    for url, why in (
        ("http://127.0.0.1:2/?x=1", "query"),
        ("http://127.0.0.1:2/mail?", "query"),
        ("http://127.0.0.1:2/mail#top", "fragment"),
        ("http://u:p@127.0.0.1:2/mail", "credentials"),
        ("http://:80", "no host"),
        ("ftp://127.0.0.1:2", "http"),
    ):
        with pytest.raises(ValueError, match=why):
            await registry.register_swarm("swarm-beta", url)
    assert registry.get_swarm_endpoint("swarm-beta") is None


def test_registry_file_entries_keep_a_path_prefix_and_skip_a_query(
    registries: Callable[..., SwarmRegistry], registry_file: Path
) -> None:
    registry_file.parent.mkdir(parents=True)
    registry_file.write_text(
        json.dumps(
            {
                "endpoints": {
                    "swarm-beta": {"base_url": "https://proxy.example/mail/"},
                    "swarm-gamma": {"base_url": "https://proxy.example/mail?x=1"},
                }
            }
        )
    )
    registry = registries()
    beta = registry.get_swarm_endpoint("swarm-beta")
    assert beta is not None and beta["base_url"] == "https://proxy.example/mail"
    assert beta["health_check_url"] == "https://proxy.example/mail/health"
    assert registry.get_swarm_endpoint("swarm-gamma") is None


async def test_register_refuses_a_name_the_remote_does_not_report(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries()
    with pytest.raises(ValueError, match="is swarm 'swarm-beta', not 'swarm-zeta'"):
        await registry.register_swarm("swarm-zeta", beta.url)
    assert registry.get_swarm_endpoint("swarm-zeta") is None


async def test_caller_id_is_kept_and_persisted_but_not_shown(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta", public=True)
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, volatile=False, caller_id="beta-svc")
    assert registry.expected_caller_id("swarm-beta") == "beta-svc"
    assert registry.expected_caller_id("swarm-alpha") is None
    assert read_file(registry_file)["endpoints"]["swarm-beta"]["caller_id"] == "beta-svc"
    assert "caller_id" not in registry.get_public_endpoints_cleaned()[0]
    reloaded = registries()
    assert reloaded.expected_caller_id("swarm-beta") == "beta-svc"


# --------------------------------------------------------------------------- persistence


async def test_persistent_registration_writes_env_ref_and_keeps_token_in_memory(
    registries: Callable[..., SwarmRegistry],
    remotes: Callable[..., Any],
    registry_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    beta = await remotes("swarm-beta")
    gamma = await remotes("swarm-gamma")
    registry = registries()
    with caplog.at_level(logging.WARNING, logger="mail.net.registry"):
        await registry.register_swarm(
            "swarm-beta", beta.url, auth_token="s3cret-beta", volatile=False
        )
    await registry.register_swarm("swarm-gamma", gamma.url, auth_token="s3cret-gamma")

    text = registry_file.read_text()
    assert "s3cret" not in text
    data = json.loads(text)
    assert set(data) == {
        "local_swarm_name",
        "local_base_url",
        "local_swarm_description",
        "local_swarm_keywords",
        "local_swarm_public",
        "endpoints",
    }
    assert set(data["endpoints"]) == {"swarm-alpha", "swarm-beta"}  # volatile gamma not written
    beta_entry = data["endpoints"]["swarm-beta"]
    assert beta_entry["auth_token_ref"] == "${" + BETA_VAR + "}"
    assert beta_entry["volatile"] is False
    assert isinstance(beta_entry["last_seen"], str)
    assert stat.S_IMODE(registry_file.stat().st_mode) == 0o600

    # Quirk fix: the given token is not discarded when the variable is unset.
    assert registry.get_resolved_auth_token("swarm-beta") == "s3cret-beta"
    assert registry.get_resolved_auth_token("swarm-gamma") == "s3cret-gamma"
    assert BETA_VAR in caplog.text


async def test_persistent_registry_survives_restart(
    registries: Callable[..., SwarmRegistry],
    remotes: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beta = await remotes("swarm-beta", description="weather")
    first = registries()
    await first.register_swarm("swarm-beta", beta.url, auth_token="tok", volatile=False)

    second = registries()
    endpoint = second.get_swarm_endpoint("swarm-beta")
    assert endpoint is not None
    assert endpoint["base_url"] == beta.url
    assert endpoint["swarm_description"] == "weather"
    assert endpoint["volatile"] is False
    assert isinstance(endpoint["last_seen"], datetime.datetime)
    # After a restart the token comes only from the environment.
    assert second.get_resolved_auth_token("swarm-beta") is None
    monkeypatch.setenv(BETA_VAR, "tok-from-env")
    assert second.get_resolved_auth_token("swarm-beta") == "tok-from-env"


async def test_file_local_settings_override_constructor(
    registries: Callable[..., SwarmRegistry], registry_file: Path
) -> None:
    registry_file.parent.mkdir(parents=True)
    registry_file.write_text(
        json.dumps(
            {
                "local_swarm_name": "swarm-alpha",
                "local_base_url": "http://127.0.0.1:1",
                "local_swarm_description": "from file",
                "local_swarm_keywords": ["k"],
                "local_swarm_public": True,
                "endpoints": {},
            }
        )
    )
    registry = registries(local_swarm_description="from template")
    local = registry.get_swarm_endpoint("swarm-alpha")
    assert local is not None
    assert local["swarm_description"] == "from file"
    assert local["keywords"] == ["k"] and local["public"] is True


async def test_volatile_entries_dropped_by_cleanup(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    gamma = await remotes("swarm-gamma")
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, volatile=False)
    await registry.register_swarm("swarm-gamma", gamma.url, volatile=True)
    assert "swarm-gamma" not in read_file(registry_file)["endpoints"]

    assert registry.cleanup_volatile_endpoints() == ["swarm-gamma"]
    assert registry.get_swarm_endpoint("swarm-gamma") is None
    assert set(registry.get_all_endpoints()) == {"swarm-alpha", "swarm-beta"}
    assert set(read_file(registry_file)["endpoints"]) == {"swarm-alpha", "swarm-beta"}


async def test_reregistering_as_volatile_removes_from_file(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, volatile=False)
    await registry.register_swarm("swarm-beta", beta.url, volatile=True)
    assert "swarm-beta" not in read_file(registry_file)["endpoints"]


async def test_unregister_persistent_updates_file(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, auth_token="t", volatile=False)
    assert registry.unregister_swarm("swarm-beta") is True
    assert registry.unregister_swarm("swarm-beta") is False
    assert registry.unregister_swarm("swarm-alpha") is False
    assert registry.get_resolved_auth_token("swarm-beta") is None
    assert set(read_file(registry_file)["endpoints"]) == {"swarm-alpha"}


async def test_save_is_atomic_when_replace_fails(
    registries: Callable[..., SwarmRegistry],
    remotes: Callable[..., Any],
    registry_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beta = await remotes("swarm-beta")
    gamma = await remotes("swarm-gamma")
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, volatile=False)
    before = registry_file.read_text()

    def crash(src: str, dst: str) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(registry_store.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        await registry.register_swarm("swarm-gamma", gamma.url, volatile=False)

    assert registry_file.read_text() == before
    assert set(json.loads(before)["endpoints"]) == {"swarm-alpha", "swarm-beta"}
    assert sorted(p.name for p in registry_file.parent.iterdir()) == [registry_file.name]


async def test_unreadable_file_is_never_overwritten(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    registry_file.parent.mkdir(parents=True)
    registry_file.write_text("{ half written")
    registry = registries()
    with pytest.raises(RuntimeError, match="not saving the swarm registry"):
        await registry.register_swarm("swarm-beta", beta.url, volatile=False)
    assert registry_file.read_text() == "{ half written"


async def test_raw_token_in_file_moves_to_memory(
    registries: Callable[..., SwarmRegistry], registry_file: Path
) -> None:
    registry_file.parent.mkdir(parents=True)
    entry = {"base_url": "http://127.0.0.1:9", "auth_token_ref": "legacy-raw", "version": "1.3"}
    registry_file.write_text(
        json.dumps({"local_swarm_name": "swarm-alpha", "endpoints": {"swarm-beta": entry}})
    )
    registry = registries()
    assert registry.get_resolved_auth_token("swarm-beta") == "legacy-raw"
    registry.save_persistent_endpoints()
    text = registry_file.read_text()
    assert "legacy-raw" not in text
    assert json.loads(text)["endpoints"]["swarm-beta"]["auth_token_ref"] == "${" + BETA_VAR + "}"


async def test_migrate_auth_tokens_to_env_refs(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, volatile=False)
    endpoint = registry.get_swarm_endpoint("swarm-beta")
    assert endpoint is not None
    endpoint["auth_token_ref"] = "hand-edited-token"

    assert registry.migrate_auth_tokens(prefix="MY_TOKENS") == {
        "swarm-beta": "MY_TOKENS_SWARM_BETA"
    }
    assert endpoint["auth_token_ref"] == "${MY_TOKENS_SWARM_BETA}"
    assert registry.get_resolved_auth_token("swarm-beta") == "hand-edited-token"
    text = registry_file.read_text()
    assert "hand-edited-token" not in text and "${MY_TOKENS_SWARM_BETA}" in text


async def test_validate_environment_variables(
    registries: Callable[..., SwarmRegistry],
    remotes: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    beta = await remotes("swarm-beta")
    gamma = await remotes("swarm-gamma")
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, volatile=False)
    await registry.register_swarm("swarm-gamma", gamma.url, volatile=False)
    monkeypatch.setenv("SWARM_AUTH_TOKEN_SWARM_GAMMA", "g")
    with caplog.at_level(logging.WARNING, logger="mail.net.registry"):
        result = registry.validate_environment_variables()
    assert result == {BETA_VAR: False, "SWARM_AUTH_TOKEN_SWARM_GAMMA": True}
    assert f"{BETA_VAR} is not set" in caplog.text
    assert "SWARM_AUTH_TOKEN_SWARM_GAMMA is not set" not in caplog.text


async def test_public_endpoints_cleaned_hide_private_swarms_and_tokens(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta", public=True)
    gamma = await remotes("swarm-gamma", public=False)
    registry = registries(local_swarm_public=True)
    await registry.register_swarm("swarm-beta", beta.url, auth_token="tok-b", volatile=False)
    await registry.register_swarm("swarm-gamma", gamma.url, auth_token="tok-g")

    cleaned = registry.get_public_endpoints_cleaned()
    assert {e["swarm_name"] for e in cleaned} == {"swarm-alpha", "swarm-beta"}
    for entry in cleaned:
        assert set(entry) == CLEANED_FIELDS
    dumped = json.dumps(cleaned)
    assert "tok-" not in dumped and "SWARM_AUTH_TOKEN" not in dumped
    beta_entry = next(e for e in cleaned if e["swarm_name"] == "swarm-beta")
    assert isinstance(beta_entry["last_seen"], str)


async def test_to_dict_includes_volatile_entries_but_no_raw_tokens(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    gamma = await remotes("swarm-gamma")
    registry = registries()
    await registry.register_swarm("swarm-gamma", gamma.url, auth_token="raw-gamma")
    document = registry.to_dict()
    assert document["endpoints"]["swarm-gamma"]["volatile"] is True
    assert "raw-gamma" not in json.dumps(document)


# --------------------------------------------------------------------------- health checks


async def test_health_checks_follow_remote_going_down_and_up(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries(health_check_interval=0.1, health_check_timeout=0.5)
    await registry.register_swarm("swarm-beta", beta.url)
    endpoint = registry.get_swarm_endpoint("swarm-beta")
    assert endpoint is not None
    endpoint["latency"] = None

    await registry.start_health_checks()
    assert registry.health_checks_running()
    await wait_for(lambda: beta.health_hits >= 1)  # the first pass runs immediately
    await wait_for(lambda: endpoint["latency"] is not None)
    assert endpoint["is_active"] and 0 <= endpoint["latency"] < 0.5  # type: ignore[operator]

    await beta.stop()
    await wait_for(lambda: not endpoint["is_active"])
    seen_while_down = endpoint["last_seen"]

    await beta.start()  # same port
    await wait_for(lambda: endpoint["is_active"])
    assert endpoint["last_seen"] is not None and seen_while_down is not None
    assert endpoint["last_seen"] > seen_while_down

    await registry.stop_health_checks()
    assert not registry.health_checks_running()
    hits = beta.health_hits
    await asyncio.sleep(0.3)
    assert beta.health_hits == hits  # the loop really stopped


async def test_health_check_non_200_marks_inactive(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries(health_check_timeout=1.0)
    await registry.register_swarm("swarm-beta", beta.url)
    beta.health_status = 503
    await registry.check_health_now()
    assert registry.get_active_endpoints().keys() == {"swarm-alpha"}
    beta.health_status = 200
    await registry.check_health_now()
    assert "swarm-beta" in registry.get_active_endpoints()


async def test_failing_remote_is_checked_with_backoff(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries(health_check_interval=0.05, health_check_timeout=0.5)
    await registry.register_swarm("swarm-beta", beta.url)
    beta.health_status = 500
    await registry.start_health_checks()
    await asyncio.sleep(1.0)
    await registry.stop_health_checks()
    # Without backoff ~20 checks would run in 1 s; with it (capped at 4 intervals) far fewer.
    assert 3 <= beta.health_hits <= 12


async def test_hanging_health_endpoint_times_out(registries: Callable[..., SwarmRegistry]) -> None:
    release = asyncio.Event()

    async def root(_: web.Request) -> web.Response:
        return web.json_response({"protocol_version": "1.3", "swarm": {}})

    async def health(_: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/", root)
    app.router.add_get("/health", health)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        registry = registries(health_check_timeout=0.3)
        await registry.register_swarm("swarm-slow", f"http://127.0.0.1:{server.port}")
        started = time.monotonic()
        await registry.check_health_now()
        assert time.monotonic() - started < 2.0
        assert registry.get_swarm_endpoint("swarm-slow")["is_active"] is False  # type: ignore[index]
    finally:
        release.set()
        await server.close()


# --------------------------------------------------------------------------- discovery


async def test_discover_swarms_accepts_both_name_fields(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    gamma = await remotes("swarm-gamma", description="g")
    delta = await remotes("swarm-delta")
    directory = await remotes("directory")
    directory.swarm_list = {
        "swarms": [
            {"swarm_name": "swarm-gamma", "base_url": gamma.url},  # what GET /swarms returns
            {"name": "swarm-delta", "base_url": delta.url},  # the original's expected form
            {"swarm_name": "swarm-alpha", "base_url": "http://127.0.0.1:1"},  # ourselves
            {"base_url": delta.url},  # nameless: skipped
            {"swarm_name": "swarm-down", "base_url": f"http://127.0.0.1:{closed_port()}"},
        ]
    }
    registry = registries()
    registered = await registry.discover_swarms(
        [directory.url, f"http://127.0.0.1:{closed_port()}"]
    )
    assert registered == ["swarm-gamma", "swarm-delta"]
    gamma_entry = registry.get_swarm_endpoint("swarm-gamma")
    assert gamma_entry is not None
    assert gamma_entry["volatile"] is True and gamma_entry["swarm_description"] == "g"
    assert registry.get_swarm_endpoint("swarm-down") is None


async def test_discovery_does_not_downgrade_known_persistent_swarm(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    directory = await remotes("directory")
    directory.swarm_list = [{"swarm_name": "swarm-beta", "base_url": beta.url}]  # bare list
    registry = registries()
    await registry.register_swarm("swarm-beta", beta.url, volatile=False)
    assert await registry.discover_swarms([directory.url]) == []
    assert "swarm-beta" in read_file(registry_file)["endpoints"]


async def test_aclose_stops_health_checks(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta")
    registry = registries(health_check_interval=0.05)
    await registry.register_swarm("swarm-beta", beta.url)
    await registry.start_health_checks()
    await registry.aclose()
    assert not registry.health_checks_running()


async def test_discovery_list_is_read_only_up_to_a_cap(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    """A discovery endpoint decides how much it sends: its list is read up to
    MAX_SWARM_LIST_BYTES, and a longer one is dropped whole (nothing from it is used)."""
    from mail.net.answers import MAX_SWARM_LIST_BYTES

    gamma = await remotes("swarm-gamma")
    directory = await remotes("directory")
    padding = [{"note": "x" * 1000}] * (MAX_SWARM_LIST_BYTES // 1000 + 1)
    directory.swarm_list = [{"swarm_name": "swarm-gamma", "base_url": gamma.url}, *padding]
    registry = registries()
    assert await registry.discover_swarms([directory.url]) == []
    assert registry.get_swarm_endpoint("swarm-gamma") is None
    directory.swarm_list = [{"swarm_name": "swarm-gamma", "base_url": gamma.url}]
    assert await registry.discover_swarms([directory.url]) == ["swarm-gamma"]
