"""The app in-process (ASGI transport): 500s with correlation ids, idle reclaim, the debug bridge."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mail.api import MAILSwarmTemplate
from mail.config import ServerConfig
from mail.server.app_factory import create_app
from server_fixtures import auth, create_key, stub_swarms_json

pytestmark = pytest.mark.timeout(60)


def make_config(tmp_path: Path, **settings: Any) -> ServerConfig:
    debug = settings.pop("debug", False)
    store = settings.pop("store", "memory")  # these tests are about the server without a store
    return ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": 8123,
            "debug": debug,
            "store": {"kind": store, "path": str(tmp_path / "data" / "mail.db")},
            "swarm": {"name": "stub", "registry": str(tmp_path / "registries" / "stub.json")},
            "settings": {"instance_idle_timeout": 0, **settings},
            "auth": {"mode": "local", "keys_file": str(tmp_path / "keys.json")},
        }
    )


def stub_template() -> MAILSwarmTemplate:
    return MAILSwarmTemplate.from_swarms_json(stub_swarms_json()[0])


@contextlib.asynccontextmanager
async def client_for(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", timeout=30
        ) as client:
            yield client


class ExplodingTemplate:
    """A template whose instances can't be built: stands in for a bug in our code."""

    name = "broken"
    version = "0"
    entrypoint = "supervisor"
    agents: list[Any] = []

    def instantiate(self, **_: Any) -> Any:
        raise RuntimeError("boom in instantiate")


async def test_unexpected_error_is_500_with_a_correlation_id_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = create_key(tmp_path / "keys.json", "user", "u1")
    app = create_app(make_config(tmp_path), template=ExplodingTemplate())
    caplog.set_level(logging.ERROR, logger="mail.server")
    async with client_for(app) as client:
        r = await client.post("/message", json={"body": "hi"}, headers=auth(key))
        assert r.status_code == 500
        correlation_id = r.json()["correlation_id"]
        assert correlation_id in r.json()["detail"]
        # The rest of the server keeps working.
        assert (await client.get("/health")).status_code == 200
    logged = [rec for rec in caplog.records if correlation_id in rec.getMessage()]
    assert logged and logged[0].exc_info is not None
    assert "boom in instantiate" not in r.text  # internals are not leaked to the caller


async def test_idle_instances_are_reclaimed_but_task_records_stay(tmp_path: Path) -> None:
    key = create_key(tmp_path / "keys.json", "user", "sleepy")
    app = create_app(make_config(tmp_path, instance_idle_timeout=3600), template=stub_template())
    async with client_for(app) as client:
        first = (
            await client.post("/message", json={"body": "remember me"}, headers=auth(key))
        ).json()
        manager = app.state.mail.instances
        old = manager.peek("user", "sleepy")
        assert old is not None
        assert await manager.reclaim_idle(now=old.last_used + 10) == []  # not idle long enough
        assert await manager.reclaim_idle(now=old.last_used + 3601) == [("user", "sleepy")]
        assert old.loop_task.done()  # the runtime loop was shut down, not leaked
        status = (await client.get("/status", headers=auth(key))).json()
        assert status["user_mail_ready"] is False
        tasks = (await client.get("/tasks", headers=auth(key))).json()
        assert tasks[first["task_id"]]["completed"] is True
        task = await client.get("/task", params={"task_id": first["task_id"]}, headers=auth(key))
        assert task.status_code == 200
        # Without a store its conversation is gone: resuming says so instead of "not found".
        r = await client.post(
            "/message",
            json={"body": "more", "task_id": first["task_id"], "resume_from": "user_response"},
            headers=auth(key),
        )
        assert r.status_code == 409 and "reclaimed" in r.json()["detail"]
        # The next request gets a fresh instance; the old records are still listed.
        second = (await client.post("/message", json={"body": "again"}, headers=auth(key))).json()
        assert second["response"] == "echo[sleepy]: again"
        assert manager.peek("user", "sleepy") is not old
        tasks = (await client.get("/tasks", headers=auth(key))).json()
        assert {first["task_id"], second["task_id"]} <= set(tasks)


async def test_shutdown_leaves_no_tasks_behind(tmp_path: Path) -> None:
    import asyncio

    keys = [create_key(tmp_path / "keys.json", "user", f"u{i}") for i in range(3)]
    app = create_app(make_config(tmp_path), template=stub_template())
    async with client_for(app) as client:
        for key in keys:
            await client.post("/message", json={"body": "hi"}, headers=auth(key))
        instances = app.state.mail.instances.all()
        assert len(instances) == 3
    assert all(inst.loop_task.done() for inst in instances)
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftover == []
    assert (tmp_path / "registries" / "stub.json").exists()  # registry saved at shutdown


async def test_busy_instances_are_not_reclaimed(tmp_path: Path) -> None:
    key = create_key(tmp_path / "keys.json", "user", "busy")
    app = create_app(make_config(tmp_path, instance_idle_timeout=3600), template=stub_template())
    async with client_for(app) as client:
        await client.post("/message", json={"body": "warm up"}, headers=auth(key))
        manager = app.state.mail.instances
        inst = manager.peek("user", "busy")
        async with manager.lease(inst):
            assert await manager.reclaim_idle(now=inst.last_used + 7200) == []
        assert manager.peek("user", "busy") is inst


async def test_concurrent_first_requests_build_one_instance(tmp_path: Path) -> None:
    import asyncio

    key = create_key(tmp_path / "keys.json", "user", "burst")
    template = stub_template()
    built: list[Any] = []
    original = template.instantiate

    def counting_instantiate(*args: Any, **kwargs: Any) -> Any:
        built.append(kwargs.get("user_id"))
        return original(*args, **kwargs)

    template.instantiate = counting_instantiate  # type: ignore[method-assign]
    app = create_app(make_config(tmp_path), template=template)
    async with client_for(app) as client:
        replies = await asyncio.gather(
            *(client.post("/message", json={"body": f"n{i}"}, headers=auth(key)) for i in range(8))
        )
    assert [r.json()["response"] for r in replies] == [f"echo[burst]: n{i}" for i in range(8)]
    assert built == ["burst"]


# ------------------------------------------------------------------------ /responses bridge


async def test_responses_bridge_message_breakpoint_and_resume(tmp_path: Path) -> None:
    from openai.types.responses import Response

    key = create_key(tmp_path / "keys.json", "user", "oai")
    app = create_app(make_config(tmp_path, debug=True), template=stub_template())
    async with client_for(app) as client:
        r = await client.post(
            "/responses",
            json={"input": [{"role": "user", "content": "Plan tomorrow"}], "tools": []},
            headers=auth(key),
        )
        assert r.status_code == 200, r.text
        plain = Response.model_validate(r.json())
        assert plain.output_text == "echo[oai]: Plan tomorrow"

        r = await client.post(
            "/responses",
            json={
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_text", "text": "BREAKPOINT check"}],
                    }
                ],
                "tools": [],
            },
            headers=auth(key),
        )
        paused = Response.model_validate(r.json())
        call = paused.output[0]
        assert call.type == "function_call" and call.name == "human_review"
        assert json.loads(call.arguments) == {"question": "BREAKPOINT check"}

        r = await client.post(
            "/responses",
            json={
                "input": [
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                    {
                        "type": "function_call_output",
                        "call_id": call.call_id,
                        "output": "looks good",
                    },
                ],
                "tools": [],
                "previous_response_id": paused.id,
            },
            headers=auth(key),
        )
        resumed = Response.model_validate(r.json())
        assert resumed.id == paused.id
        assert resumed.output_text == "reviewed: looks good"


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        ({"tools": []}, "parameter 'input' is required"),
        ({"input": [], "tools": "none"}, "parameter 'tools' must be a list, got str"),
        (
            {"input": [], "tools": [], "parallel_tool_calls": "yes"},
            "parameter 'parallel_tool_calls' must be a bool",
        ),
        (
            {
                "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}],
                "tools": [],
            },
            "previous_response_id",
        ),
        ({"input": [], "tools": [1]}, "parameter 'tools[0]' must be a tool object"),
        (
            {
                "input": [{"role": "user", "content": "hi"}],
                "tools": [],
                "previous_response_id": "x",
            },
            "parameter 'previous_response_id' must be a UUID",
        ),
    ],
)
async def test_responses_bridge_validation(tmp_path: Path, payload: dict, detail: str) -> None:
    key = create_key(tmp_path / "keys.json", "user", "oai")
    app = create_app(make_config(tmp_path, debug=True), template=stub_template())
    async with client_for(app) as client:
        r = await client.post("/responses", json=payload, headers=auth(key))
        assert r.status_code == 400
        assert detail in r.json()["detail"]
        assert (await client.post("/responses", json=payload)).status_code == 401


async def test_responses_bridge_refuses_an_unknown_previous_response(tmp_path: Path) -> None:
    key = create_key(tmp_path / "keys.json", "user", "oai")
    app = create_app(make_config(tmp_path, debug=True), template=stub_template())
    unknown = "7f1d2c3b-4a5e-4f60-8a7b-9c0d1e2f3a4b"
    async with client_for(app) as client:
        r = await client.post(
            "/responses",
            json={
                "input": [{"role": "user", "content": "continue please"}],
                "tools": [],
                "previous_response_id": unknown,
            },
            headers=auth(key),
        )
        assert r.status_code == 404 and unknown in r.json()["detail"]
        tasks = (await client.get("/tasks", headers=auth(key))).json()
        assert unknown not in tasks  # no task was started under that id


class _SlowToStopSwarm:
    """Stands in for an instance's swarm: its runtime loop ends only when `stopped` is set."""

    def __init__(self) -> None:
        self.stopped = asyncio.Event()
        self.shutdown_called = asyncio.Event()

    async def shutdown(self) -> None:
        self.shutdown_called.set()

    def get_all_tasks(self) -> dict[str, Any]:
        return {}


async def test_closing_while_the_reaper_stops_an_instance_neither_hangs_nor_leaks() -> None:
    """Server shutdown racing an idle reclaim (both on the 1 s timeout in cluster hosts): the
    reaper was cancelled while it waited for the instance's loop, swallowed the cancellation and
    looped forever, so `close()` never returned."""
    from support.bare_instances import add_instance, bare_manager

    manager = bare_manager(idle_timeout=0.05)
    swarm = _SlowToStopSwarm()
    loop_task = add_instance(manager, "u", swarm).loop_task
    manager.start()
    await asyncio.wait_for(swarm.shutdown_called.wait(), 5)  # the reaper is stopping it now
    closing = asyncio.create_task(manager.close())
    await asyncio.sleep(0.05)  # close() has begun while the reaper waits for the loop
    swarm.stopped.set()  # the instance's loop ends
    await asyncio.wait_for(closing, 10)
    assert loop_task.done() and not loop_task.cancelled()  # stopped cleanly, not cut off
    assert manager.peek("user", "u") is None
    assert manager._reaper is None


async def test_with_the_sqlite_store_a_reclaimed_task_continues(tmp_path: Path) -> None:
    key = create_key(tmp_path / "keys.json", "user", "sleepy")
    config = make_config(tmp_path, instance_idle_timeout=3600, store="sqlite")
    app = create_app(config, template=stub_template())
    async with client_for(app) as client:
        first = (
            await client.post("/message", json={"body": "remember me"}, headers=auth(key))
        ).json()
        manager = app.state.mail.instances
        old = manager.peek("user", "sleepy")
        assert old is not None
        assert await manager.reclaim_idle(now=old.last_used + 3601) == [("user", "sleepy")]
        r = await client.post(
            "/message",
            json={"body": "more", "task_id": first["task_id"], "resume_from": "user_response"},
            headers=auth(key),
        )
        assert r.status_code == 200, r.text
        assert r.json()["task_id"] == first["task_id"]
        assert r.json()["response"] == "echo[sleepy]: more"
