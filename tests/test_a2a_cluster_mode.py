"""Where the A2A bridge is not installed (cluster mode): its routes say so with 501, and a
message to an A2A peer is an interswarm error saying why, not a POST to the A2A agent's
``/interswarm/forward``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fastapi import FastAPI

from mail.core.message import create_agent_address, make_message, make_request
from mail.net import InterswarmError, InterswarmRouter, SwarmRegistry
from mail.server.app_factory import install_front_doors

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/a2a"),
        ("POST", "/a2a/message:send"),  # the HTTP+JSON binding
        ("GET", "/a2a/tasks/some-task"),
        ("GET", "/.well-known/agent-card.json"),
        ("POST", "/task/cancel"),
        ("POST", "/mcp"),
    ],
)
async def test_local_only_doors_answer_501_in_cluster_mode(method: str, path: str) -> None:
    app = FastAPI()
    install_front_doors(app, object(), clustered=True)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        r = await http.request(method, path, json={})
    assert r.status_code == 501, r.text
    assert "not served in cluster mode" in r.json()["detail"]


async def test_an_a2a_peer_without_the_bridge_is_a_clear_interswarm_error(tmp_path: Any) -> None:
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"name": "agent", "version": "1"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    async with TestServer(app, host="127.0.0.1") as server:
        reg = SwarmRegistry("hub", "http://127.0.0.1:1", persistence_file=tmp_path / "r.json")
        await reg.register_swarm("agents", str(server.make_url("")))
        reg.endpoints["agents"]["metadata"] = {"kind": "a2a"}  # as a card-read entry would be
        router = InterswarmRouter(reg, "hub", request_timeout=5)
        await router.start()
        hits.clear()
        try:
            payload = make_request(
                "task-1",
                create_agent_address("relay@hub"),
                create_agent_address("echo@agents"),
                "q",
                "hello",
                sender_swarm="hub",
                recipient_swarm="agents",
            )
            owner = "user:u1@hub"
            envelope = router.wrap_message(
                make_message(payload, "request"), "agents", owner, [owner]
            )
            with pytest.raises(InterswarmError, match="A2A peers are not reachable here"):
                await router.send_interswarm(envelope, "forward")
        finally:
            await router.stop()
            await reg.aclose()
    assert hits == []
