"""The v1.3.6 runtime and swarm API runs unchanged (issue 41): MAILRuntime, MAILSwarm,
MAILTask, breakpoints and the interswarm controls, used the way the original documents them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from sse_starlette import ServerSentEvent
from tests.support.v13_swarm import (
    HUMAN_REVIEW,
    anthropic_breakpoint_factory,
    responses_breakpoint_factory,
    runtime_for,
    template,
    until,
)

from mail import MAILAgent, MAILSwarmTemplate
from mail.core.events import TaskEvent
from mail.net import SwarmRegistry

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------------------ 1 and 2: runtime


async def test_runtime_submit_can_be_awaited_and_events_are_server_sent_events() -> None:
    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    runtime = runtime_for(swarm)
    loop = asyncio.create_task(runtime.run_continuous())
    try:
        message = swarm.build_message("Hello", "start", ["supervisor"], "user", "request")
        task_id = message["message"]["task_id"]
        assert await runtime.submit(message) is None  # `async def submit` in v1.3
        await until(lambda: (t := runtime.get_task_by_id(task_id)) is not None and t.completed)

        events = runtime.get_events_by_task_id(task_id)
        assert events and all(isinstance(ev, ServerSentEvent) for ev in events)
        assert all(isinstance(ev.data, dict) for ev in events)
        assert all(ev.data["task_id"] == task_id for ev in events)
        assert isinstance(events[0].data["description"], str)
        assert events[0].event == "new_message"
        # Ours, under its own name: the TaskEvent records, the same events.
        typed = runtime.get_task_events(task_id)
        assert all(isinstance(ev, TaskEvent) for ev in typed)
        assert [ev.id for ev in typed] == [ev.id for ev in events]
        assert runtime.get_events_by_task_id("no-such-task") == []

        # Not awaiting it works too (our own callers): queued at once, no warning.
        second = swarm.build_message("Again", "more", ["supervisor"], "user", "request")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            runtime.submit(second)
        second_id = second["message"]["task_id"]
        await until(lambda: (t := runtime.get_task_by_id(second_id)) is not None and t.completed)
    finally:
        await runtime.shutdown()
        await asyncio.wait_for(loop, 5)


async def test_every_way_v13_code_awaits_submit_works() -> None:
    """v1.3's `async def submit` returned a coroutine: asyncio's coroutine-only doors (a task,
    a task group, another thread's call into the loop) took it, as `await` and `gather` do."""
    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    runtime = runtime_for(swarm)
    loop = asyncio.create_task(runtime.run_continuous())

    def message(text: str) -> Any:
        return swarm.build_message(text, "start", ["supervisor"], "user", "request")

    sent = [message(f"form {i}") for i in range(8)]
    try:
        assert asyncio.iscoroutine(runtime.submit(sent[0]))
        assert await asyncio.create_task(runtime.submit(sent[1])) is None
        assert await asyncio.get_running_loop().create_task(runtime.submit(sent[2])) is None
        async with asyncio.TaskGroup() as group:
            in_group = group.create_task(runtime.submit(sent[3]))
        assert in_group.result() is None
        assert await asyncio.gather(
            runtime.submit(sent[4]), asyncio.ensure_future(runtime.submit(sent[5]))
        ) == [None, None]
        assert await asyncio.wait_for(asyncio.shield(runtime.submit(sent[6])), 5) is None
        running = asyncio.get_running_loop()
        from_thread = await asyncio.to_thread(
            lambda: asyncio.run_coroutine_threadsafe(runtime.submit(sent[7]), running).result(5)
        )
        assert from_thread is None
        ids = [m["message"]["task_id"] for m in sent]

        def all_completed() -> bool:
            tasks = [runtime.get_task_by_id(task_id) for task_id in ids]
            return all(t is not None and t.completed for t in tasks)

        await until(all_completed)
    finally:
        await runtime.shutdown()
        await asyncio.wait_for(loop, 5)


async def test_runtime_submit_and_wait_and_submit_and_stream_keep_their_signatures() -> None:
    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    runtime = runtime_for(swarm)
    loop = asyncio.create_task(runtime.run_continuous())
    try:
        message = swarm.build_message("Hello", "start", ["supervisor"], "user", "request")
        response = await runtime.submit_and_wait(message, 5.0, None)  # (message, timeout, ...)
        assert response["message"]["body"] == "all done"

        streamed = swarm.build_message("Hello", "stream", ["supervisor"], "user", "request")
        frames = [ev async for ev in runtime.submit_and_stream(streamed, 5.0, None)]
        assert all(isinstance(ev, ServerSentEvent) for ev in frames)
        assert frames[-1].event == "task_complete"
        assert frames[-1].data["response"] == "all done"
        assert json.loads(frames[0].data)["task_id"] == streamed["message"]["task_id"]
    finally:
        await runtime.shutdown()
        await asyncio.wait_for(loop, 5)


# ------------------------------------------------------------------------------ 2 and 5: swarm


async def test_post_message_show_events_gives_server_sent_events() -> None:
    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    try:
        response, events = await asyncio.wait_for(
            swarm.post_message(subject="Check", body="Status?", show_events=True), 10
        )
        assert response["message"]["body"] == "all done"
        assert events and all(isinstance(ev, ServerSentEvent) for ev in events)
        names = [ev.event for ev in events]
        assert "new_message" in names and names[-1] == "task_complete"
        assert events[-1].data["description"] == "response: 'all done'"
        task_id = response["message"]["task_id"]
        assert [ev.event for ev in swarm.get_events(task_id)] == names
        # Without show_events: an empty list, as documented.
        _, none = await asyncio.wait_for(swarm.post_message(body="Again"), 10)
        assert none == []
        # Ours: the same as TaskEvent records.
        _, typed = await asyncio.wait_for(
            swarm.post_message_task_events(body="Typed", show_events=True), 10
        )
        assert typed and all(isinstance(ev, TaskEvent) for ev in typed)
    finally:
        await swarm.shutdown()


def test_swarm_agents_and_actions_are_lists() -> None:
    swarm = template(actions=[HUMAN_REVIEW], supervisor_actions=[HUMAN_REVIEW]).instantiate(
        instance_params={}, user_id="u-compat"
    )
    assert isinstance(swarm.agents, list)
    assert isinstance(swarm.agents[0], MAILAgent)
    assert [agent.name for agent in swarm.agents] == ["supervisor", "helper"]
    assert swarm.actions == [HUMAN_REVIEW]
    assert swarm.agent_names == ["supervisor", "helper"]
    assert [agent.name for agent in swarm.supervisors] == ["supervisor"]
    assert swarm.adjacency_matrix == [[0, 1], [1, 0]]
    # Ours: by name.
    assert swarm.agents_by_name["helper"] is swarm.agents[1]
    assert swarm.actions_by_name == {"human_review": HUMAN_REVIEW}


# ------------------------------------------------------------------------------ 8: breakpoints


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        (
            anthropic_breakpoint_factory,
            {
                "arguments": '{"question":"ship it?"}',
                "call_id": "toolu_01Compat",
                "name": "human_review",
                "type": "function_call",
                "id": "fc_toolu_01Compat",
                "status": "completed",
            },
        ),
        (
            responses_breakpoint_factory,
            {
                "arguments": '{"question": "ship it?"}',
                "call_id": "call_item7",
                "name": "human_review",
                "type": "function_call",
                "id": "fc_item7",
                "status": "completed",
            },
        ),
    ],
    ids=["anthropic", "responses"],
)
async def test_breakpoint_body_uses_openai_function_call_ids(
    factory: Any, expected: dict[str, Any]
) -> None:
    swarm = template(
        factory,
        actions=[HUMAN_REVIEW],
        supervisor_actions=[HUMAN_REVIEW],
        breakpoint_tools=["human_review"],
    ).instantiate(instance_params={}, user_id="u-compat")
    try:
        response, _ = await asyncio.wait_for(swarm.post_message(body="Ship?"), 10)
    finally:
        await swarm.shutdown()
    assert response["message"]["subject"] == "::breakpoint_tool_call::"
    assert json.loads(response["message"]["body"]) == [expected]


# ------------------------------------------------------------------------------ more of v1.3


async def test_run_task_by_id_after_submit() -> None:
    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    runtime = runtime_for(swarm)
    try:
        message = swarm.build_message("Hello", "start", ["supervisor"], "user", "request")
        task_id = message["message"]["task_id"]
        await runtime.submit(message)
        answer = await asyncio.wait_for(runtime.run_task(task_id=task_id), 10)
        assert answer["message"]["body"] == "all done"
        assert (await runtime.run_task(task_id))["message"]["body"] == "all done"  # answered

        missing = await runtime.run_task(resume_from="breakpoint_tool_call")
        assert missing["msg_type"] == "broadcast_complete"
        assert missing["message"]["subject"] == "::runtime_error::"
        assert "parameter 'task_id' is required" in missing["message"]["body"]
    finally:
        await runtime.shutdown()


async def test_task_records_list_their_messages() -> None:
    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    try:
        response, _ = await asyncio.wait_for(swarm.post_message(body="Status?"), 10)
        task = swarm.get_task_by_id(response["message"]["task_id"])
        assert task is not None
        messages = task.get_messages()
        assert messages and messages[0]["message"]["body"] == "Status?"
        assert task.get_messages_by_user() == [messages[0]]
        assert task.get_messages_by_type("request") == [messages[0]]
        assert messages[0] in task.get_messages_by_agent("supervisor", sent=False)
        assert task.get_lifetime().total_seconds() >= 0
    finally:
        await swarm.shutdown()


async def test_interswarm_controls_are_coroutines_and_the_router_takes_envelopes() -> None:
    from mail.core.message import MAILInterswarmMessage
    from mail.net import InterswarmRouter

    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    assert await swarm.is_interswarm_running() is False
    runtime = runtime_for(swarm)
    assert await runtime.is_interswarm_running() is False
    await runtime.start_interswarm()  # interswarm not enabled: nothing to start
    await runtime.stop_interswarm()
    assert await runtime.is_interswarm_running() is False

    registry = SwarmRegistry("local", "http://127.0.0.1:9", None)
    router = InterswarmRouter(registry, "local")
    received: list[Any] = []

    async def handler(message: Any) -> None:
        received.append(message)

    router.register_message_handler("local_message_handler", handler)
    message = swarm.build_message("Hi", "over there", ["supervisor"], "user", "request")
    envelope: MAILInterswarmMessage = {
        "message_id": "m-1",
        "source_swarm": "remote",
        "target_swarm": "local",
        "timestamp": message["timestamp"],
        "payload": message["message"],
        "msg_type": "request",
        "auth_token": None,
        "task_owner": "user:u@remote",
        "task_contributors": ["user:u@remote"],
        "metadata": {},
    }
    await router.receive_interswarm_message_forward(envelope)
    await router.receive_interswarm_message_back(envelope)
    assert received == [envelope, envelope]
    with pytest.raises(ValueError, match="wrong swarm"):
        await router.receive_interswarm_message_forward({**envelope, "target_swarm": "x"})


# ------------------------------------------------------------------------------ v1.3 accessors


async def test_runtime_and_swarm_keep_v13_accessors() -> None:
    from mail import MAILRuntime

    assert inspect.signature(MAILRuntime).parameters["enable_db_agent_histories"].default is False
    quiet = template().instantiate(instance_params={}, user_id="u-compat", print_llm_streams=False)
    assert quiet.print_llm_streams is False and quiet.runtime.print_llm_streams is False
    await quiet.shutdown()

    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    try:
        assert swarm.print_llm_streams is True
        swarm.print_llm_streams = False
        assert swarm.runtime.print_llm_streams is False
        runtime = swarm.runtime
        assert runtime.interswarm_router is None  # interswarm is off
        answers = runtime.response_queue  # documented runtime state: (task_id, response)
        response, _ = await asyncio.wait_for(swarm.post_message(body="Status?"), 10)
        task_id = response["message"]["task_id"]
        assert runtime.get_response_message(task_id) == response
        assert swarm.get_response_message(task_id) == response
        assert runtime.get_response_message("no-such-task") is None
        assert answers.get_nowait() == (task_id, response)
    finally:
        await swarm.shutdown()


async def test_task_records_keep_v13_queue_and_record_methods() -> None:
    from mail.core.tasks import MAILTask

    swarm = template().instantiate(instance_params={}, user_id="u-compat")
    runtime = runtime_for(swarm)
    try:
        message = swarm.build_message("Hello", "queued", ["supervisor"], "user", "request")
        task_id = message["message"]["task_id"]
        runtime.submit(message)  # queued, no loop runs
        task = runtime.get_task_by_id(task_id)
        assert task is not None and len(runtime.mailbox) == 1
        await task.queue_stash(runtime.mailbox)  # a coroutine in v1.3
        assert len(runtime.mailbox) == 0 and len(task.task_message_queue) == 1
        task.mark_complete()
        await task.queue_load(runtime.mailbox)
        assert len(runtime.mailbox) == 1 and task.task_message_queue == []
        assert task.is_running and not task.completed

        task.add_remote_swarm("beta")
        record = task.to_db_dict()
        for key in ("task_id", "task_owner", "task_contributors", "remote_swarms"):
            assert key in record, key
        assert {"is_running", "completed", "start_time", "title"} <= set(record)
        again = MAILTask.from_db_dict(record)
        assert again.task_id == task_id and again.remote_swarms == {"beta"}
        assert again.start_time == task.start_time and again.is_running
    finally:
        await runtime.shutdown()


class Peer:
    """A loopback aiohttp server answering like a MAIL server; records what it was sent."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any], str]] = []
        self.runner: Any = None

    async def start(self) -> str:
        from aiohttp import web

        async def root(request: web.Request) -> web.Response:
            swarm = {"name": "remote", "description": "", "keywords": [], "public": True}
            return web.json_response({"name": "mail", "protocol_version": "1.3", "swarm": swarm})

        async def health(request: web.Request) -> web.Response:
            return web.json_response({"status": "healthy", "swarm_name": "remote"})

        async def record(request: web.Request) -> web.Response:
            auth = request.headers.get("Authorization", "")
            self.received.append((request.path, await request.json(), auth))
            return web.json_response({"status": "success", "path": request.path})

        app = web.Application()
        app.router.add_get("/", root)
        app.router.add_get("/health", health)
        for path in ("/interswarm/forward", "/interswarm/back", "/interswarm/message"):
            app.router.add_post(path, record)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        await self.runner.cleanup()


async def test_interswarm_send_receive_and_router_methods_of_v13(tmp_path: Path) -> None:
    from tests.support.interswarm_agents import swarm_json

    from mail.net import InterswarmRouter

    alone = template().instantiate(instance_params={}, user_id="u-compat")
    with pytest.raises(ValueError, match="interswarm router not available"):
        await alone.receive_interswarm_message({})  # type: ignore[typeddict-item]
    with pytest.raises(ValueError, match="interswarm router not available"):
        await alone.send_interswarm_message({})  # type: ignore[typeddict-item]
    await alone.shutdown()

    peer = Peer()
    base_url = await peer.start()
    registry = SwarmRegistry("local", "http://127.0.0.1:1", str(tmp_path / "reg.json"))
    await registry.register_swarm("remote", base_url, auth_token="swarm-token", volatile=True)
    # docs/differences.md "swarm registry": even a volatile endpoint carries the reference,
    # never the literal, so a v1.3 migration with another prefix has nothing to move.
    registry.migrate_auth_tokens_to_env_refs(env_var_prefix="OTHER_PREFIX")
    endpoint = registry.get_swarm_endpoint("remote")
    assert endpoint is not None
    assert endpoint["auth_token_ref"] == "${SWARM_AUTH_TOKEN_REMOTE}"
    assert registry.get_resolved_auth_token("remote") == "swarm-token"
    router = InterswarmRouter(registry, "local", request_timeout=5)
    assert not router.is_running() and await router.is_running() is False
    await router.start()
    assert router.is_running() and await router.is_running() is True
    swarm = MAILSwarmTemplate.from_swarms_json(swarm_json("local", "remote")[0]).instantiate(
        {}, user_id="alice"
    )
    swarm.swarm_registry = registry
    await swarm.start_interswarm(router)
    try:
        assert swarm.runtime.interswarm_router is router
        message = swarm.build_message("Hi", "over there", ["supervisor@remote"], "agent", "request")
        owner = "user:alice@local"
        envelope = router.convert_local_message_to_interswarm(
            message, owner, [owner], {"trace": "t-1"}
        )
        assert envelope["target_swarm"] == "remote" and envelope["source_swarm"] == "local"
        assert envelope["metadata"] == {"trace": "t-1"} and envelope["task_owner"] == owner

        await router.send_interswarm_message_forward(envelope)
        await router.send_interswarm_message_back(envelope)
        await swarm.send_interswarm_message(envelope, "back")
        paths = [path for path, _, _ in peer.received]
        assert paths == ["/interswarm/forward", "/interswarm/back", "/interswarm/back"]
        assert peer.received[0][2] == "Bearer swarm-token"
        with pytest.raises(ValueError, match="unknown swarm endpoint"):
            await router.send_interswarm_message_forward({**envelope, "target_swarm": "nowhere"})
        with pytest.raises(ValueError, match="error sending interswarm message"):
            await swarm.send_interswarm_message({**envelope, "target_swarm": "nowhere"})

        user_envelope = {**envelope, "auth_token": "user-token"}
        answer = await swarm.post_interswarm_user_message(user_envelope)  # type: ignore[arg-type]
        assert answer["path"] == "/interswarm/message"  # type: ignore[typeddict-item]
        path, body, auth = peer.received[-1]
        assert auth == "Bearer user-token"
        assert body["body"] == "over there" and body["targets"] == ["supervisor@remote"]
        assert body["msg_type"] == "request" and body["task_id"] == message["message"]["task_id"]
        with pytest.raises(ValueError, match="user token is required"):
            await router.post_interswarm_user_message({**envelope, "auth_token": None})

        stats = router.get_routing_stats()
        assert stats["local_swarm_name"] == "local" and stats["total_endpoints"] == 2
        assert stats["active_endpoints"] == 2
        assert stats["registered_handlers"] == list(router.message_handlers)

        with pytest.raises(ValueError, match="error routing interswarm message"):
            await swarm.receive_interswarm_message({"target_swarm": "local"})  # type: ignore[typeddict-item]
        with pytest.raises(ValueError, match="invalid direction"):
            await swarm.receive_interswarm_message(envelope, "sideways")  # type: ignore[arg-type]
    finally:
        await swarm.shutdown()
        await router.stop()
        await registry.aclose()
        await peer.stop()


def test_registry_public_endpoints_and_from_dict(tmp_path: Path) -> None:
    document = {
        "local_swarm_name": "alpha",
        "local_base_url": "http://127.0.0.1:9",
        "local_swarm_public": True,
        "persistence_file": str(tmp_path / "alpha.json"),
        "endpoints": {
            name: {
                "swarm_name": name,
                "base_url": f"http://127.0.0.1:9/{name}",
                "version": "1.3",
                "health_check_url": f"http://127.0.0.1:9/{name}/health",
                "auth_token_ref": f"${{SWARM_AUTH_TOKEN_{name.upper()}}}",
                "last_seen": None,
                "is_active": True,
                "public": name == "beta",
                "volatile": False,
            }
            for name in ("beta", "gamma")
        },
    }
    registry = SwarmRegistry.from_dict(document)
    assert isinstance(registry, SwarmRegistry)
    assert registry.local_swarm_name == "alpha" and registry.local_swarm_public is True
    assert set(registry.get_all_endpoints()) == {"alpha", "beta", "gamma"}
    assert set(registry.get_public_endpoints()) == {"alpha", "beta"}
    assert registry.get_public_endpoints()["beta"]["base_url"] == "http://127.0.0.1:9/beta"
    again = SwarmRegistry.from_dict(registry.to_dict())
    assert set(again.get_all_endpoints()) == {"alpha", "beta", "gamma"}


async def test_load_tasks_from_db_restores_from_database_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

    monkeypatch.chdir(Path(__file__).parent)  # no stray .env
    with scratch_schema("v13_load") as schema:
        monkeypatch.setenv("DATABASE_URL", with_search_path(BASE_URL, schema))
        first = template().instantiate(instance_params={}, user_id="u-db")
        try:
            await first.load_agent_histories_from_db()  # v1.3's server did this after instantiate
            response, _ = await asyncio.wait_for(first.post_message(body="Keep me"), 10)
            task_id = response["message"]["task_id"]
            assert await first.flush_store(10)
        finally:
            await first.shutdown()

        second = template().instantiate(instance_params={}, user_id="u-db")
        try:
            assert second.get_task_by_id(task_id) is None
            await second.load_tasks_from_db()
            restored = second.get_task_by_id(task_id)
            assert restored is not None and restored.completed
            assert second.get_response_message(task_id) == response
            await second.load_tasks_from_db()  # already attached: nothing more happens
        finally:
            await second.shutdown()

        opted_out = template(enable_db_agent_histories=False).instantiate(
            instance_params={}, user_id="u-db"
        )
        try:
            await opted_out.load_tasks_from_db()
            assert opted_out.get_task_by_id(task_id) is None
        finally:
            await opted_out.shutdown()
