"""Strict task state in the runtime: no agent turn starts once its task has completed."""

from __future__ import annotations

import asyncio
from typing import Any

from mail.core.runtime_resume import TaskConflictError
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    make_runtime,
    run_task,
    send_request,
    send_response,
    task_complete,
    tool_call,
    two_agent_runtime,
    user_message,
)


async def test_no_agent_turn_starts_after_the_task_completed() -> None:
    sup = ScriptedAgent(
        "supervisor",
        [
            [send_request("worker", "a"), send_request("worker", "b"), send_request("helper")],
            [task_complete("done while the worker was busy")],
        ],
        default=[task_complete("late")],
    )
    # The worker's first turn is slow; its second message waits for the agent meanwhile.
    worker = ScriptedAgent("worker", default=[send_response("supervisor")], sleep=0.5)
    helper = ScriptedAgent("helper", [[send_response("supervisor", "quick")]])
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["worker", "helper"], True),
            "worker": AgentSpec(worker, ["supervisor"]),
            "helper": AgentSpec(helper, ["supervisor"]),
        }
    )
    loop = asyncio.create_task(rt.run_continuous())
    try:
        response = await asyncio.wait_for(rt.submit_and_wait(user_message("t1"), timeout=5), 6)
        assert response["message"]["body"] == "done while the worker was busy"
        await asyncio.wait_for(rt.await_idle(), 5)
    finally:
        await rt.shutdown()
        await asyncio.gather(loop, return_exceptions=True)
    assert len(worker.calls) == 1  # the queued turn for "b" never ran
    assert len(sup.calls) == 2


async def test_a_new_message_to_a_running_task_is_a_conflict() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(history, tool_choice):  # noqa: ANN001, ANN202
        started.set()
        await release.wait()
        return None, [task_complete("first")]

    rt = make_runtime({"supervisor": AgentSpec(slow, [], True)})
    first = asyncio.create_task(run_task(rt))
    await asyncio.wait_for(started.wait(), 5)
    try:
        rt.check_submission("t1", None, {})
    except TaskConflictError as exc:
        assert "still running" in str(exc)
    else:
        raise AssertionError("a message to a running task was accepted")
    second = await asyncio.wait_for(rt.run_task(user_message("t1"), timeout=5), 6)
    assert second["message"]["subject"] == "::task_error::"
    assert "still running" in second["message"]["body"]
    release.set()
    assert (await first)["message"]["body"] == "first"
    # Refusals are not events of the running task.
    assert [e.event for e in rt.get_task_events("t1")].count("task_error") == 0


async def test_an_agent_message_over_the_cap_is_not_sent() -> None:
    sup = ScriptedAgent(
        "supervisor",
        [
            [send_request("worker", "w" * 101)],
            [task_complete("gave up on the long message")],
        ],
    )
    worker = ScriptedAgent("worker", default=[send_response("supervisor")])
    rt = make_runtime(
        {"supervisor": AgentSpec(sup, ["worker"], True), "worker": AgentSpec(worker, [])}
    )
    rt.max_message_body = 100
    response = await run_task(rt)
    assert response["message"]["body"] == "gave up on the long message"
    assert worker.calls == []  # the oversized request never reached the worker
    seen = str(sup.calls[1].history)
    assert "101 characters long; the limit is 100" in seen
    oversized_user = await asyncio.wait_for(
        rt.run_task(user_message("t2", "u" * 101), timeout=5), 6
    )
    assert oversized_user["message"]["subject"] == "::task_error::"
    assert "the limit is 100" in oversized_user["message"]["body"]


async def test_open_tasks_follow_running_paused_finished_and_resumed_tasks() -> None:
    rt, _, _ = two_agent_runtime(
        [[tool_call("get_weather", {"city": "Paris"})], [task_complete("done")]],
        actions={"get_weather": _weather},
        breakpoint_tools=["get_weather"],
    )
    response = await run_task(rt, "paused")
    assert response["message"]["subject"] == "::breakpoint_tool_call::"
    assert rt.open_tasks.ids() == {"paused"}  # a breakpoint pause holds its place
    resumed = await asyncio.wait_for(
        rt.run_task(
            user_message("paused", "go on"),
            resume_from="breakpoint_tool_call",
            timeout=5,
            breakpoint_tool_call_result={"content": "sunny"},
        ),
        6,
    )
    assert resumed["message"]["body"] == "done"
    assert rt.open_tasks.ids() == set()

    sup = ScriptedAgent("supervisor", default=[task_complete("ok")])
    many = make_runtime({"supervisor": AgentSpec(sup, [], True)})
    for number in range(30):
        await run_task(many, f"t{number}")
    assert many.open_tasks.ids() == set()
    assert len(many.open_tasks._ids) == 0  # noqa: SLF001 - finished tasks are not rescanned


async def _weather(args: dict[str, Any]) -> str:
    return "sunny"
