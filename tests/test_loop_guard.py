"""Loop bounds (issue 12, item 2): a task's agents can't run forever, whatever they call."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from mail.config import ServerSettings
from mail.core.loop_guard import LoopGuard
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    events_named,
    make_runtime,
    run_task,
    task_complete,
    tool_call,
)


def _runtime(agent: ScriptedAgent, **guard: Any):  # noqa: ANN202
    # No model latency: the agent answers at once (await_message must not count the
    # agent's own finished turn as something on its way).
    rt = make_runtime({"supervisor": AgentSpec(agent, can_complete_tasks=True)})
    for name, value in guard.items():
        setattr(rt.loop_guard, name, value)
    return rt


async def test_same_failing_call_repeated_stops_the_task_with_a_task_error() -> None:
    # The reported loop: await_message with nothing on its way, an error notice, again...
    agent = ScriptedAgent("supervisor", default=[tool_call("await_message", {})])
    rt = _runtime(agent, max_repeats=4)
    response = await run_task(rt, timeout=10)
    assert response["message"]["subject"] == "::task_error::"
    body = response["message"]["body"]
    assert "same failing call `await_message` 4 times in a row" in body
    assert "task_repeat_limit" in body and "no outstanding requests" in body
    assert len(agent.calls) == 4
    task = rt.get_task_by_id("t1")
    assert task is not None and task.completed and not task.is_running
    assert [e.description for e in events_named(rt, "t1", "task_error")] == [body]


async def test_turn_bound_stops_calls_that_differ_each_time() -> None:
    # Different arguments every time: not a repeat, but still endless; the turn bound ends it.
    counter = itertools.count()
    agent = ScriptedAgent(
        "supervisor",
        default=lambda _h, _c: [tool_call("await_message", {"reason": f"r{next(counter)}"})],
    )
    rt = _runtime(agent, max_turns=12)
    response = await run_task(rt, timeout=10)
    assert response["message"]["subject"] == "::task_error::"
    assert "more than 12 turns" in response["message"]["body"]
    assert "task_turn_limit" in response["message"]["body"]
    assert len(agent.calls) == 12


async def test_a_success_between_failures_resets_the_repeat_count() -> None:
    fail = [tool_call("await_message", {})]
    ok = [tool_call("help", {})]
    agent = ScriptedAgent(
        "supervisor", [fail, fail, ok, fail, fail, ok, fail, fail, [task_complete("done")]]
    )
    rt = _runtime(agent, max_repeats=3)
    response = await run_task(rt, timeout=10)
    assert response["message"]["body"] == "done"


async def test_bounds_start_again_when_a_completed_task_is_continued() -> None:
    agent = ScriptedAgent(
        "supervisor",
        [[tool_call("help", {})], [task_complete("one")]]
        + [[tool_call("help", {})], [task_complete("two")]],
    )
    rt = _runtime(agent, max_turns=2)
    assert (await run_task(rt, timeout=10))["message"]["body"] == "one"
    assert (await run_task(rt, timeout=10))["message"]["body"] == "two"


async def test_zero_or_none_means_no_bound() -> None:
    guard = LoopGuard(max_turns=None, max_repeats=0)
    call = tool_call("await_message", {})
    for _ in range(2000):
        assert guard.begin_turn("t") is None
        assert guard.record_call("t", "a", call, "ERROR: nothing") is None


def test_settings_parse_the_bounds() -> None:
    assert ServerSettings().task_turn_limit == 500
    assert ServerSettings().task_repeat_limit == 5
    assert ServerSettings().task_no_tool_call_limit == 3
    settings = ServerSettings(task_turn_limit=0, task_repeat_limit=0, task_no_tool_call_limit=0)
    assert settings.task_turn_limit is None and settings.task_repeat_limit is None
    assert settings.task_no_tool_call_limit is None
    with pytest.raises(ValueError):
        ServerSettings(task_turn_limit=-1)
