"""Interswarm failure handling in-process: a swarm whose agent addresses `supervisor@remote`,
with the remote played by a loopback aiohttp server that refuses, hangs, or is unknown.

Each failure must reach the sending agent as `::interswarm_error::` within the router
timeout, so the task finishes instead of hanging.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from tests.support.interswarm_agents import swarm_json

from mail import MAILSwarmTemplate
from mail.net import InterswarmRouter, SwarmRegistry

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 0.5


class FakeRemote:
    """Answers GET / and /health like a MAIL server; /interswarm/forward per `mode`."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.forwarded: list[dict[str, Any]] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/", self.root)
        app.router.add_get("/health", self.health)
        app.router.add_post("/interswarm/forward", self.forward)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def root(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "name": "mail",
                "protocol_version": "1.3",
                "swarm": {"name": "remote", "description": "fake", "keywords": [], "public": True},
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "healthy", "swarm_name": "remote"})

    async def forward(self, request: web.Request) -> web.Response:
        self.forwarded.append(await request.json())
        if self.mode == "hang":
            await asyncio.sleep(TIMEOUT * 4)
        if self.mode == "error":
            return web.json_response({"detail": "remote exploded"}, status=500)
        return web.json_response({"status": "success"})


async def _swarm(tmp_path: Path, registry: SwarmRegistry):  # noqa: ANN202
    template = MAILSwarmTemplate.from_swarms_json(swarm_json("local", "remote")[0])
    swarm = template.instantiate({}, user_id="alice", registry_file=str(tmp_path / "reg.json"))
    swarm.swarm_registry = registry
    router = InterswarmRouter(registry, "local", request_timeout=TIMEOUT)
    await router.start()
    await swarm.start_interswarm(router)
    return swarm, router


async def _run(swarm: Any) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    response, _ = await swarm.post_message(body="hello remote", timeout=20)
    return response, time.monotonic() - started


@pytest.mark.parametrize("mode", ["hang", "error", "refused"])
async def test_remote_failure_reaches_agent_within_timeout(tmp_path: Path, mode: str) -> None:
    remote = FakeRemote(mode)
    base_url = await remote.start()
    registry = SwarmRegistry("local", "http://127.0.0.1:1", str(tmp_path / "reg.json"))
    await registry.register_swarm("remote", base_url, auth_token="secret", volatile=True)
    if mode == "refused":
        await remote.stop()
    swarm, router = await _swarm(tmp_path, registry)
    try:
        response, elapsed = await _run(swarm)
    finally:
        await swarm.shutdown()
        await router.stop()
        await registry.aclose()
        await remote.stop()
    body = response["message"]["body"]
    assert body.startswith("error: Your message to swarm 'remote' could not be delivered")
    assert elapsed < TIMEOUT + 5
    if mode == "error":
        assert "500" in body


async def test_unknown_swarm_and_missing_token(tmp_path: Path) -> None:
    registry = SwarmRegistry("local", "http://127.0.0.1:1", str(tmp_path / "reg.json"))
    swarm, router = await _swarm(tmp_path, registry)
    try:
        response, _ = await _run(swarm)
        assert "unknown swarm endpoint: 'remote'" in response["message"]["body"]

        remote = FakeRemote("ok")
        base_url = await remote.start()
        try:
            await registry.register_swarm("remote", base_url, volatile=True)
            response, _ = await _run(swarm)
        finally:
            await remote.stop()
        assert "authentication token missing for swarm 'remote'" in response["message"]["body"]
        assert remote.forwarded == []
        events = [e.event for t in swarm.get_all_tasks().values() for e in t.events]
        assert "interswarm_message_error" in events
    finally:
        await swarm.shutdown()
        await router.stop()
        await registry.aclose()


async def test_successful_send_carries_owner_contributors_and_token(tmp_path: Path) -> None:
    remote = FakeRemote("ok")
    base_url = await remote.start()
    registry = SwarmRegistry("local", "http://127.0.0.1:1", str(tmp_path / "reg.json"))
    await registry.register_swarm("remote", base_url, auth_token="secret", volatile=True)
    swarm, router = await _swarm(tmp_path, registry)
    try:
        task_id = str(uuid.uuid4())
        waiter = asyncio.create_task(swarm.post_message(body="hi", task_id=task_id, timeout=5))
        for _ in range(100):
            if remote.forwarded:
                break
            await asyncio.sleep(0.02)
        envelope = remote.forwarded[0]["message"]
        assert envelope["task_owner"] == "user:alice@local"
        assert envelope["task_contributors"] == ["user:alice@local"]
        assert envelope["payload"]["sender"]["address"] == "supervisor@local"
        assert envelope["payload"]["recipient"]["address"] == "supervisor@remote"
        assert envelope["target_swarm"] == "remote" and envelope["source_swarm"] == "local"
        # The remote answers through /interswarm/back; play that part by hand.
        answer = {
            **envelope,
            "message_id": str(uuid.uuid4()),
            "source_swarm": "remote",
            "target_swarm": "local",
            "msg_type": "response",
            "task_contributors": ["user:alice@local", "swarm:local@remote"],
            "payload": {
                **envelope["payload"],
                "request_id": str(uuid.uuid4()),
                "sender": {"address_type": "agent", "address": "supervisor@remote"},
                "recipient": {"address_type": "agent", "address": "supervisor@local"},
                "subject": "answer",
                "body": "remote answer",
            },
        }
        # Progress is taken only from a swarm the task was sent to, for a known, running task.
        update = {"kind": "status", "state": "working"}
        assert swarm.receive_interswarm_progress(task_id, "remote", "working", update)
        assert not swarm.receive_interswarm_progress(task_id, "elsewhere", "forged", update)
        assert not swarm.receive_interswarm_progress("no-such-task", "remote", "x", update)
        assert swarm.accept_interswarm_message(answer, "back") == task_id
        # A re-delivered envelope (same message_id) is ignored.
        assert swarm.accept_interswarm_message(answer, "back") == task_id
        response, _ = await asyncio.wait_for(waiter, 5)
        assert response["message"]["body"] == "alpha got: remote answer"
        task = swarm.get_task_by_id(task_id)
        assert task is not None
        received = [e for e in task.events if e.event == "interswarm_message_received"]
        assert len(received) == 1
        progress = [e for e in task.events if e.event == "interswarm_message_progress"]
        assert [(e.description, e.extra_data) for e in progress] == [
            ("working", {**update, "swarm": "remote"})
        ]
        assert not swarm.receive_interswarm_progress(task_id, "remote", "late", update)
        assert "swarm:local@remote" in task.task_contributors
        assert "remote" in task.remote_swarms
    finally:
        await swarm.shutdown()
        await router.stop()
        await registry.aclose()
        await remote.stop()
