"""InterswarmRouter against real loopback HTTP servers (aiohttp.web on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mail.core.message import (
    create_agent_address,
    make_broadcast,
    make_message,
    make_request,
)
from mail.net import InterswarmError, InterswarmRouter, SwarmRegistry
from mail.net.router import choose_direction

pytestmark = pytest.mark.timeout(30)

BETA_VAR = "SWARM_AUTH_TOKEN_SWARM_BETA"
OWNER = "user:u1@swarm-alpha"


class RemoteServer:
    """A remote MAIL server that records interswarm POSTs and answers as configured."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.reply: Any = None
        self.hang = False
        self.release = asyncio.Event()
        self.server: TestServer | None = None
        self.health_status = 404  # no /health unless a test wants one
        self.health_delay = 0.0
        self.health_hits = 0

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        async def root(_: web.Request) -> web.Response:
            return web.json_response({"protocol_version": "1.3", "swarm": {"public": True}})

        async def interswarm(request: web.Request) -> web.Response:
            self.requests.append(
                {
                    "path": request.path,
                    "headers": dict(request.headers),
                    "json": await request.json(),
                }
            )
            if self.hang:
                await self.release.wait()
            body = self.reply or {
                "swarm": "swarm-beta",
                "task_id": "t",
                "status": "success",
                "local_runner": "swarm:x@swarm-beta",
            }
            if isinstance(body, str):
                return web.Response(text=body, status=self.status)
            return web.json_response(body, status=self.status)

        async def health(_: web.Request) -> web.Response:
            self.health_hits += 1
            await asyncio.sleep(self.health_delay)
            return web.json_response({"status": "ok"}, status=self.health_status)

        app = web.Application()
        app.router.add_get("/", root)
        app.router.add_get("/health", health)
        app.router.add_post("/interswarm/{direction}", interswarm)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    async def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            await self.server.close()


@pytest.fixture(autouse=True)
def _no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("SWARM_AUTH_TOKEN"):
            monkeypatch.delenv(var)


@pytest.fixture
async def remote() -> AsyncIterator[RemoteServer]:
    server = RemoteServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def registry(tmp_path: Any) -> AsyncIterator[SwarmRegistry]:
    reg = SwarmRegistry(
        "swarm-alpha", "http://127.0.0.1:1", persistence_file=tmp_path / "alpha.json"
    )
    yield reg
    await reg.aclose()


@pytest.fixture
async def router(registry: SwarmRegistry) -> AsyncIterator[InterswarmRouter]:
    rt = InterswarmRouter(registry, "swarm-alpha", request_timeout=0.5)
    await rt.start()
    yield rt
    await rt.stop()


def request_message(target: str = "worker@swarm-beta") -> Any:
    payload = make_request(
        "task-1",
        create_agent_address("supervisor@swarm-alpha"),
        create_agent_address(target),
        "Question",
        "What is the forecast?",
        sender_swarm="swarm-alpha",
        recipient_swarm="swarm-beta",
        routing_info={"stream": True},
    )
    return make_message(payload, "request")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- pure parts


def test_choose_direction() -> None:
    assert choose_direction("swarm-beta", [OWNER]) == "forward"
    assert choose_direction("swarm-beta", [OWNER, "swarm:alpha@swarm-beta"]) == "back"
    assert choose_direction("swarm-beta", ["swarm-beta"]) == "forward"  # bare id
    assert choose_direction("swarm-beta", ["user:x@swarm-beta-2"]) == "forward"


async def test_wrap_message_builds_envelope(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="tok")
    message = request_message()
    contributors = [OWNER]
    envelope = router.wrap_message(message, "swarm-beta", OWNER, contributors)
    assert envelope["message_id"] == message["id"]
    assert envelope["source_swarm"] == "swarm-alpha"
    assert envelope["target_swarm"] == "swarm-beta"
    assert envelope["payload"] == message["message"]
    assert envelope["msg_type"] == "request"
    assert envelope["auth_token"] == "tok"
    assert envelope["task_owner"] == OWNER
    assert envelope["task_contributors"] == [OWNER]
    assert envelope["task_contributors"] is not contributors
    assert envelope["metadata"] == {}
    assert isinstance(envelope["timestamp"], str)


async def test_wrap_rejects_broadcast_complete(router: InterswarmRouter) -> None:
    payload = make_broadcast(
        "task-1",
        create_agent_address("supervisor"),
        [create_agent_address("all")],
        "done",
        "done",
    )
    with pytest.raises(InterswarmError, match="broadcast_complete"):
        router.wrap_message(make_message(payload, "broadcast_complete"), "swarm-beta", OWNER, [])


# --------------------------------------------------------------------------- tokens


async def test_token_resolution_order(
    router: InterswarmRouter,
    registry: SwarmRegistry,
    remote: RemoteServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, volatile=False)
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER], "from-envelope")
    # No registry token: the envelope's token is the fallback.
    assert router.resolve_token("swarm-beta", envelope) == "from-envelope"
    # The registry's env reference wins over the envelope.
    monkeypatch.setenv(BETA_VAR, "from-env")
    assert router.resolve_token("swarm-beta", envelope) == "from-env"


async def test_missing_token_error_text(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url)
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    assert envelope["auth_token"] is None
    with pytest.raises(InterswarmError) as info:
        await router.send_interswarm(envelope, "forward")
    assert str(info.value) == "authentication token missing for swarm 'swarm-beta'"
    assert remote.requests == []


# --------------------------------------------------------------------------- sending


@pytest.mark.parametrize("direction", ["forward", "back"])
async def test_send_posts_envelope_with_headers(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer, direction: str
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="beta-token")
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    reply = await router.send_interswarm(envelope, direction)  # type: ignore[arg-type]
    assert reply["status"] == "success"

    [received] = remote.requests
    assert received["path"] == f"/interswarm/{direction}"
    headers = received["headers"]
    assert headers["Authorization"] == "Bearer beta-token"
    assert headers["User-Agent"] == "MAIL-Interswarm-Router/swarm-alpha"
    assert headers["Content-Type"].startswith("application/json")
    assert list(received["json"]) == ["message"]
    sent = received["json"]["message"]
    assert sent["message_id"] == envelope["message_id"]
    assert sent["payload"]["body"] == "What is the forecast?"
    assert sent["payload"]["routing_info"] == {"stream": True}
    assert sent["task_owner"] == OWNER


async def test_envelope_token_used_when_registry_has_none(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url)
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER], "env-tok")
    await router.send_interswarm(envelope, "forward")
    assert remote.requests[0]["headers"]["Authorization"] == "Bearer env-tok"
    assert remote.requests[0]["json"]["message"]["auth_token"] == "env-tok"


async def test_unknown_swarm(router: InterswarmRouter) -> None:
    envelope = router.wrap_message(request_message("w@nowhere"), "nowhere", OWNER, [OWNER], "t")
    with pytest.raises(InterswarmError) as info:
        await router.send_interswarm(envelope, "forward")
    assert str(info.value) == "unknown swarm endpoint: 'nowhere'"
    assert info.value.swarm_name == "nowhere"


async def test_inactive_swarm(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    registry.get_swarm_endpoint("swarm-beta")["is_active"] = False  # type: ignore[index]
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    with pytest.raises(InterswarmError, match="swarm 'swarm-beta' is not active") as info:
        await router.send_interswarm(envelope, "forward")
    # It was checked again before the send was refused, and the refusal says why.
    assert "checked again just now: HTTP 404" in str(info.value)
    assert remote.health_hits == 1 and remote.requests == []


async def test_inactive_swarm_back_up_is_reached_with_one_probe(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    registry.get_swarm_endpoint("swarm-beta")["is_active"] = False  # type: ignore[index]
    remote.health_status, remote.health_delay = 200, 0.2
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    results = await asyncio.gather(*(router.send_interswarm(envelope, "forward") for _ in range(5)))
    assert [r["status"] for r in results] == ["success"] * 5
    assert len(remote.requests) == 5
    assert remote.health_hits == 1  # five sends waited on the same probe
    assert registry.get_swarm_endpoint("swarm-beta")["is_active"] is True  # type: ignore[index]


async def test_dead_peer_costs_one_probe_per_cooldown(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    registry.get_swarm_endpoint("swarm-beta")["is_active"] = False  # type: ignore[index]
    remote.health_status = 503
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    for _ in range(10):
        with pytest.raises(InterswarmError, match="HTTP 503"):
            await router.send_interswarm(envelope, "forward")
    assert remote.health_hits == 1 and remote.requests == []


async def test_connection_refused(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    await remote.stop()
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    started = time.monotonic()
    with pytest.raises(InterswarmError, match="cannot connect to swarm 'swarm-beta'"):
        await router.send_interswarm(envelope, "forward")
    assert time.monotonic() - started < 2.0


async def test_hanging_remote_times_out(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    remote.hang = True
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    started = time.monotonic()
    with pytest.raises(InterswarmError, match="did not answer within 0.5s"):
        await router.send_interswarm(envelope, "forward")
    elapsed = time.monotonic() - started
    assert 0.4 <= elapsed < 2.0
    assert len(remote.requests) == 1  # it really was waiting on the remote


async def test_non_2xx_reply(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    remote.status = 400
    remote.reply = {"detail": "task is not running"}
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    with pytest.raises(InterswarmError) as info:
        await router.send_interswarm(envelope, "back")
    assert info.value.status == 400
    assert "400" in str(info.value) and "task is not running" in str(info.value)


async def test_long_error_body_is_truncated(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    remote.status = 500
    remote.reply = "x" * 20_000 + " because the disk is full"
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    with pytest.raises(InterswarmError) as info:
        await router.send_interswarm(envelope, "forward")
    assert info.value.status == 500
    assert len(str(info.value)) < 4500
    assert str(info.value).endswith("because the disk is full")  # the reason survives


async def test_a_peer_error_detail_is_never_cut_before_the_reason(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    remote.status = 400
    long_id = "fed-" + "9" * 300
    remote.reply = {"detail": f"parameter 'task_id' must be a UUID, got '{long_id}': rejected"}
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    with pytest.raises(InterswarmError) as info:
        await router.send_interswarm(envelope, "forward")
    assert str(info.value).endswith(f"got '{long_id}': rejected")


async def test_send_requires_started_router(registry: SwarmRegistry, remote: RemoteServer) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    router = InterswarmRouter(registry, "swarm-alpha")
    assert not router.is_running()
    envelope = router.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER])
    with pytest.raises(InterswarmError, match="HTTP client session is not open"):
        await router.send_interswarm(envelope, "forward")
    await router.start()
    assert router.is_running()
    await router.stop()
    assert not router.is_running()


# --------------------------------------------------------------------------- user messages


async def test_post_interswarm_user_message(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    remote.reply = {"response": {"msg_type": "broadcast_complete"}, "events": None}
    body = {"body": "hi", "targets": ["worker@swarm-beta"], "msg_type": "request", "stream": True}
    reply = await router.post_interswarm_user_message(remote.url, body, "user-key")
    assert reply == {"response": {"msg_type": "broadcast_complete"}, "events": None}
    [received] = remote.requests
    assert received["path"] == "/interswarm/message"
    assert received["headers"]["Authorization"] == "Bearer user-key"
    assert received["json"] == {**body, "user_token": "user-key"}
    assert "user_token" not in body  # the caller's dict is not modified

    # A registered swarm name works as well as a URL.
    await registry.register_swarm("swarm-beta", remote.url)
    await router.post_interswarm_user_message("swarm-beta", body, "user-key")
    assert len(remote.requests) == 2
    with pytest.raises(InterswarmError, match="unknown swarm endpoint: 'nowhere'"):
        await router.post_interswarm_user_message("nowhere", body, "user-key")


# --------------------------------------------------------------------------- route_message


async def test_route_message_local_and_remote(
    router: InterswarmRouter, registry: SwarmRegistry, remote: RemoteServer
) -> None:
    await registry.register_swarm("swarm-beta", remote.url, auth_token="t")
    delivered: list[Any] = []

    async def handler(message: Any) -> None:
        delivered.append(message)

    router.register_message_handler("request", handler)
    local = request_message("analyst@swarm-alpha")
    assert await router.route_message(local) is local
    assert delivered == [local] and remote.requests == []

    remote_msg = request_message()
    contributors = [OWNER, "swarm:alpha@swarm-beta"]
    result = await router.route_message(
        remote_msg, task_owner=OWNER, task_contributors=contributors
    )
    assert result is remote_msg
    assert remote.requests[0]["path"] == "/interswarm/back"


async def test_route_message_failure_returns_router_error(router: InterswarmRouter) -> None:
    message = request_message(f"worker@swarm-down-{closed_port()}")
    result = await router.route_message(message)
    assert result["msg_type"] == "response"
    assert result["message"]["subject"] == "Router Error"
    assert result["message"]["recipient"] == message["message"]["sender"]
    assert "unknown swarm endpoint" in result["message"]["body"]


async def test_injected_session_is_shared_and_left_open(
    tmp_path: Any, remote: RemoteServer
) -> None:
    async with aiohttp.ClientSession() as session:
        reg = SwarmRegistry(
            "swarm-alpha",
            "http://127.0.0.1:1",
            persistence_file=tmp_path / "a.json",
            session=session,
        )
        await reg.register_swarm("swarm-beta", remote.url, auth_token="t")
        rt = InterswarmRouter(reg, "swarm-alpha", session=session)
        assert rt.is_running()
        await rt.send_interswarm(
            rt.wrap_message(request_message(), "swarm-beta", OWNER, [OWNER]), "forward"
        )
        await rt.stop()
        await reg.aclose()
        assert not session.closed
        assert len(remote.requests) == 1
