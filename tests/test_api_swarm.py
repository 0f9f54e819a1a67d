"""MAILSwarm: posting, events, streaming, resumes, manual steps, inspection, rewiring."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import pytest

from mail import MAILAction, MAILAgentTemplate, MAILSwarm, MAILSwarmTemplate
from mail.core.events import TaskEvent
from mail.core.tools import AgentToolCall
from support.scripted_agents import (
    ScriptedAgent,
    echo_action,
    send_request,
    send_response,
    task_complete,
    tool_call,
    tool_results,
)
from support.v13_swarm import until

GET_WEATHER = MAILAction("get_weather", "Weather", {"type": "object"}, echo_action)


def build(
    supervisor: list[Any],
    worker: list[Any] | None = None,
    *,
    worker_completes: bool = False,
    **template_kwargs: Any,
) -> tuple[MAILSwarm, ScriptedAgent, ScriptedAgent]:
    sup = ScriptedAgent("supervisor", list(supervisor))
    wrk = ScriptedAgent("worker", list(worker or []))
    instance_kwargs = template_kwargs.pop("instance", {})
    t = MAILSwarmTemplate(
        "apiswarm",
        agents=[
            MAILAgentTemplate(
                "supervisor",
                lambda **kw: sup,
                ["worker"],
                actions=[GET_WEATHER],
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            MAILAgentTemplate(
                "worker",
                lambda **kw: wrk,
                ["supervisor"],
                enable_entrypoint=worker_completes,
                can_complete_tasks=worker_completes,
            ),
        ],
        entrypoint="supervisor",
        **template_kwargs,
    )
    return t.instantiate(user_id="api-user", **instance_kwargs), sup, wrk


async def post(swarm: MAILSwarm, body: str = "hello", **kwargs: Any) -> Any:
    return await asyncio.wait_for(swarm.post_message(body, timeout=5, **kwargs), 6)


# ------------------------------------------------------------------------------ posting


async def test_post_message_without_a_running_loop() -> None:
    swarm, sup, _ = build([[task_complete("direct answer")]])
    response, events = await post(swarm, "question", subject="Q")
    assert response["message"]["body"] == "direct answer"
    assert events == []
    incoming = sup.calls[0].last_content
    assert '<from type="user">api-user</from>' in incoming
    assert "<subject>Q</subject>" in incoming and "<body>question</body>" in incoming
    assert not swarm.runtime._loop_running  # the ephemeral loop is gone again


async def test_post_message_show_events_returns_server_sent_events_of_this_task_only() -> None:
    from sse_starlette import ServerSentEvent

    swarm, _, _ = build([[task_complete("one")], [task_complete("b")], [task_complete("two")]])
    _, first = await post(swarm, task_id="task-a", show_events=True)
    await post(swarm, task_id="task-b")
    response, second = await post(swarm, task_id="task-a", show_events=True)
    assert response["message"]["body"] == "two"
    for events in (first, second):
        assert events and all(isinstance(e, ServerSentEvent) for e in events)
        assert all(isinstance(e.data, dict) and e.data["task_id"] == "task-a" for e in events)
    # Only the new events of the continued task are returned.
    assert [e.id for e in second] == [str(len(first) + i + 1) for i in range(len(second))]
    assert first[0].event == "new_message" and second[0].event == "new_message"
    assert any("task_complete response from supervisor" in e.data["description"] for e in second)
    # The same events as TaskEvent records.
    _, typed = await swarm.post_message_task_events(task_id="task-c", show_events=True)
    assert typed and all(isinstance(e, TaskEvent) and e.task_id == "task-c" for e in typed)


async def test_non_stream_post_records_a_task_complete_event() -> None:
    # BEHAVIOR §5.2: a successful non-stream submit stores `task_complete` with the
    # description "response: '{body}'" (streams send theirs without storing it).
    swarm, _, _ = build([[task_complete("final words")]])
    _, events = await post(swarm, task_id="tc", show_events=True)
    assert events[-1].event == "task_complete"
    assert events[-1].data["description"] == "response: 'final words'"
    assert events[-1].data["extra_data"] == {}
    stored = swarm.get_task_events("tc")
    assert [e.event for e in stored].count("task_complete") == 1


async def test_post_message_with_run_continuous_and_entrypoint_override() -> None:
    swarm, sup, wrk = build(
        [[task_complete("from supervisor")]],
        [[task_complete("from worker")]],
        worker_completes=True,
    )
    loop = asyncio.create_task(swarm.run_continuous())
    try:
        a, _ = await post(swarm)
        b, _ = await post(swarm, entrypoint="worker")
        c, _ = await post(swarm, entrypoint="  ")
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 2)
    assert [a["message"]["body"], b["message"]["body"]] == ["from supervisor", "from worker"]
    assert c["message"]["subject"] == "::agent_error::"  # supervisor's script ran out
    assert len(wrk.calls) == 1 and len(sup.calls) == 2


async def test_task_message_limit_of_the_template_applies() -> None:
    swarm, sup, _ = build(
        [[send_request("worker", "w")], [task_complete("cut short")]],
        [[send_response("supervisor", "r")]],
        task_message_limit=2,
    )
    response, _ = await post(swarm)
    assert response["message"]["body"] == "cut short"
    assert sup.calls[1].tool_choice == {"type": "function", "name": "task_complete"}


async def test_post_message_and_run_with_max_steps_and_action_override() -> None:
    seen: list[AgentToolCall] = []

    async def override(call: AgentToolCall) -> str:
        seen.append(call)
        return "overridden weather"

    swarm, sup, _ = build([[tool_call("get_weather", {"city": "X"})], [task_complete("ok")]])
    response, events = await asyncio.wait_for(
        swarm.post_message_and_run(
            "go", show_events=True, max_steps=5, action_override=override, timeout=5
        ),
        6,
    )
    assert response["message"]["body"] == "ok"
    assert [c.tool_name for c in seen] == ["get_weather"]
    assert tool_results(sup.calls[1].history) == ["SUCCESS: overridden weather"]
    assert any(e.event == "action_complete" for e in events)


async def test_admin_caller_sends_as_admin() -> None:
    swarm, sup, _ = build([[task_complete("ok")]], instance={"user_role": "admin"})
    await post(swarm)
    assert '<from type="admin">api-user</from>' in sup.calls[0].last_content


def test_build_message_shapes_and_errors() -> None:
    swarm, _, _ = build([])
    request = swarm.build_message("S", "B", ["supervisor"], task_id="t-1")
    payload = request["message"]
    assert request["msg_type"] == "request" and payload["task_id"] == "t-1"
    assert payload["sender"] == {"address_type": "user", "address": "api-user"}
    assert payload["recipient"] == {"address_type": "agent", "address": "supervisor"}
    assert payload["sender_swarm"] == "apiswarm" and payload["recipient_swarm"] == "apiswarm"
    broadcast = swarm.build_message("S", "B", ["supervisor", "worker"], type="broadcast")
    assert [r["address"] for r in broadcast["message"]["recipients"]] == ["supervisor", "worker"]
    assert broadcast["message"]["task_id"]  # a fresh task id
    with pytest.raises(ValueError, match="exactly one target"):
        swarm.build_message("S", "B", ["a", "b"])
    with pytest.raises(
        NotImplementedError, match="type 'interrupt' not implemented for this method"
    ):
        swarm.build_message("S", "B", ["a"], type="interrupt")


def test_post_message_and_submit_message_show_their_v13_signatures() -> None:
    # v1.3's names are our *_task_events methods with ServerSentEvents: help() and
    # inspect.signature still show each one's own name and parameters.
    post = inspect.signature(MAILSwarm.post_message)
    assert list(post.parameters) == [
        "self",
        "body",
        "subject",
        "msg_type",
        "entrypoint",
        "show_events",
        "timeout",
        "task_id",
        "resume_from",
        "kwargs",
    ]
    assert post.parameters["subject"].default == "New Message"
    submit = inspect.signature(MAILSwarm.submit_message)
    assert list(submit.parameters) == [
        "self",
        "message",
        "timeout",
        "show_events",
        "resume_from",
        "kwargs",
    ]
    assert (MAILSwarm.post_message.__name__, MAILSwarm.submit_message.__name__) == (
        "post_message",
        "submit_message",
    )


async def test_submit_message_and_submit_message_nowait() -> None:
    swarm, _, _ = build([[task_complete("first")], [task_complete("second")]])
    message = swarm.build_message("S", "B", ["supervisor"], task_id="t-s")
    response, events = await asyncio.wait_for(
        swarm.submit_message(message, timeout=5, show_events=True), 6
    )
    assert response["message"]["body"] == "first" and events
    loop = asyncio.create_task(swarm.run_continuous())
    try:
        await swarm.submit_message_nowait(
            swarm.build_message("S", "B", ["supervisor"], task_id="t-n")
        )
        for _ in range(200):
            if swarm.get_response_message("t-n") is not None:
                break
            await asyncio.sleep(0.01)
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 2)
    assert swarm.get_response_message("t-n")["message"]["body"] == "second"  # type: ignore[index]


# ------------------------------------------------------------------------------ streaming


async def test_stream_events_and_stream_message() -> None:
    swarm, _, _ = build([[task_complete("streamed")], [task_complete("again")]])

    async def take(gen: Any) -> list[Any]:
        return [e async for e in gen]

    events = await asyncio.wait_for(take(swarm.stream_events("hi", task_id="s1", timeout=5)), 6)
    assert events[0].event == "new_message" and events[-1].event == "task_complete"
    assert json.loads(events[-1].data)["response"] == "streamed"

    frames = await asyncio.wait_for(take(swarm.stream_message("hi", task_id="s2", timeout=5)), 6)
    from sse_starlette import ServerSentEvent

    assert all(isinstance(f, ServerSentEvent) for f in frames)
    assert [f.event for f in frames][-1] == "task_complete"
    assert frames[0].id == "1"
    assert frames[-1].data["response"] == "again"  # the closing event's data is a dict
    assert json.loads(str(frames[-1].data))["response"] == "again"  # ... written as JSON
    assert json.loads(frames[0].data)["task_id"] == "s2"  # stored events: JSON text


async def test_stream_pings_with_short_interval_through_the_swarm() -> None:
    swarm, sup, _ = build([[task_complete("slow")]])
    sup.sleep = 0.25

    async def take() -> list[Any]:
        return [e async for e in swarm.stream_events("hi", timeout=5, ping_interval=0.05)]

    events = await asyncio.wait_for(take(), 6)
    assert sum(e.event == "ping" for e in events) >= 2
    assert events[-1].event == "task_complete"


async def test_post_message_stream_returns_an_event_source_response() -> None:
    from sse_starlette import EventSourceResponse

    swarm, _, _ = build([[task_complete("x")]])
    response = await swarm.post_message_stream("hi")
    assert isinstance(response, EventSourceResponse)


# ------------------------------------------------------------------------------ resumes


async def test_breakpoint_resume_through_post_message() -> None:
    swarm, sup, _ = build(
        [[tool_call("get_weather", {"city": "Paris"}, call_id="bp-9")], [task_complete("sunny")]],
        breakpoint_tools=["get_weather"],
    )
    paused, _ = await post(swarm, "weather?", task_id="bp")
    assert paused["message"]["subject"] == "::breakpoint_tool_call::"
    [entry] = json.loads(paused["message"]["body"])
    resumed, events = await post(
        swarm,
        "",
        task_id="bp",
        resume_from="breakpoint_tool_call",
        breakpoint_tool_call_result=json.dumps([{"call_id": entry["call_id"], "content": "25C"}]),
        show_events=True,
    )
    assert resumed["message"]["body"] == "sunny"
    assert sup.calls[1].last["content"] == "25C"
    assert events[0].event == "breakpoint_action_complete"


async def test_user_response_resume_through_post_message() -> None:
    swarm, sup, _ = build([[task_complete("Which city?")], [task_complete("Rome: sunny")]])
    await post(swarm, "weather?", task_id="ur")
    answer, _ = await post(swarm, "Rome", task_id="ur", resume_from="user_response")
    assert answer["message"]["body"] == "Rome: sunny"
    assert "<body>Rome</body>" in sup.calls[1].last_content
    missing, _ = await post(swarm, "x", task_id="nope", resume_from="user_response")
    assert missing["message"]["subject"] == "::task_error::"


# ------------------------------------------------------------------------------ manual


async def test_manual_mode_through_the_swarm() -> None:
    swarm, sup, _ = build([[tool_call("text_output", {"content": "my move"})]])
    loop = asyncio.create_task(swarm.run_continuous(mode="manual"))
    try:
        message = swarm.build_message("S", "start the game", ["supervisor"], task_id="g")
        await swarm.submit_message_nowait(message)
        await asyncio.wait_for(swarm.await_queue_empty(), 2)
        assert sup.calls == []
        result = await asyncio.wait_for(swarm.manual_step("g", "supervisor", payload="Go."), 3)
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 2)
    assert result["message"]["body"] == "my move"
    assert sup.calls[0].last["content"] == (
        "<private_message>\n<from>api-user</from>\nstart the game\n</private_message>\n\n\nGo."
    )


# ------------------------------------------------------------------------------ inspection


async def test_inspection_helpers() -> None:
    swarm, _, _ = build([[task_complete("done")]])
    assert swarm.get_all_tasks() == {} and swarm.get_pending_requests() == {}
    response, _ = await post(swarm, task_id="insp")
    tasks = swarm.get_all_tasks()
    assert list(tasks) == ["insp"]
    task = swarm.get_task_by_id("insp")
    assert task is tasks["insp"] and task.completed
    assert swarm.get_task_by_id("missing") is None
    assert swarm.get_response_message("insp") == response
    assert swarm.get_task_events("insp") == task.events
    record = task.to_dict()
    assert record["task_owner"] == "user:api-user@apiswarm"
    json.dumps(record)


async def test_pending_requests_while_waiting() -> None:
    swarm, sup, _ = build([[task_complete("slow")]])
    sup.sleep = 1.0
    pending = asyncio.create_task(post(swarm, task_id="p1"))
    await until(lambda: len(sup.calls) == 1)  # the agent is working on it
    assert list(swarm.get_pending_requests()) == ["p1"]
    await pending
    assert swarm.get_pending_requests() == {}


# ------------------------------------------------------------------------------ rewiring


async def test_update_from_adjacency_matrix_changes_runtime_enforcement() -> None:
    swarm, sup, wrk = build(
        [[send_request("worker", "w")], [task_complete("done")]],
        [[send_response("supervisor", "r")]],
    )
    swarm.update_from_adjacency_matrix([[0, 0], [1, 0]])
    assert swarm.agents_by_name["supervisor"].comm_targets == []
    assert swarm.runtime.agents["supervisor"].comm_targets == []
    response, _ = await post(swarm)
    assert response["message"]["body"] == "done"
    assert wrk.calls == []
    assert tool_results(sup.calls[1].history)[0].startswith("ERROR")
    with pytest.raises(ValueError, match="2x2"):
        swarm.update_from_adjacency_matrix([[0]])


def test_get_subswarm_from_a_running_swarm() -> None:
    swarm, _, _ = build([])
    sub = swarm.get_subswarm(["supervisor"], "solo")
    assert isinstance(sub, MAILSwarmTemplate)
    assert sub.name == "apiswarm-solo" and sub.agent_names == ["supervisor"]
    assert sub.agents[0].comm_targets == []
    assert sub.agents[0].can_complete_tasks and sub.entrypoint == "supervisor"


async def test_action_override_of_post_message_and_run_does_not_leak() -> None:
    async def override(call: AgentToolCall) -> str:
        return "overridden"

    swarm, sup, _ = build(
        [
            [tool_call("get_weather", {"city": "A"})],
            [task_complete("first")],
            [tool_call("get_weather", {"city": "B"})],
            [task_complete("second")],
        ]
    )
    await asyncio.wait_for(
        swarm.post_message_and_run("one", action_override=override, timeout=5), 6
    )
    await post(swarm, "two")
    assert tool_results(sup.calls[1].history) == ["SUCCESS: overridden"]
    # The override belonged to the first call only: the second runs the real action.
    assert tool_results(sup.calls[3].history) == ['SUCCESS: echo: {"city": "B"}']


async def test_user_broadcast_can_be_acknowledged_into_memory() -> None:
    swarm, sup, _ = build(
        [[tool_call("acknowledge_broadcast", {"note": "user prefers metric"}), task_complete("k")]]
    )
    response, _ = await post(swarm, "Always use metric units", msg_type="broadcast")
    assert response["message"]["body"] == "k"
    assert '<from type="user">api-user</from>' in sup.calls[0].last_content
    assert tool_results(sup.live_histories[0])[0] == "SUCCESS: broadcast acknowledged"
    found = await swarm.runtime.memory.search("supervisor", "metric units")
    assert any("Always use metric units" in str(e["value"].get("content")) for e in found)
    assert all(e["value"]["task_id"] == response["message"]["task_id"] for e in found)
