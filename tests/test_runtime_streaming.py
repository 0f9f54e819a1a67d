"""Streaming a task's events: order, ids, heartbeats, final events, breakpoints, timeouts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mail.core.events import TaskEvent
from mail.core.runtime import MAILRuntime
from support.scripted_agents import (
    send_request,
    send_response,
    task_complete,
    tool_call,
    two_agent_runtime,
    user_message,
)


async def collect(stream: AsyncIterator[TaskEvent], limit: float = 5.0) -> list[TaskEvent]:
    async def run() -> list[TaskEvent]:
        return [event async for event in stream]

    return await asyncio.wait_for(run(), limit)


@pytest.fixture
async def serving() -> AsyncIterator[Any]:
    started: list[tuple[MAILRuntime, asyncio.Task[None]]] = []

    def start(rt: MAILRuntime) -> MAILRuntime:
        started.append((rt, asyncio.create_task(rt.run_continuous())))
        return rt

    yield start
    for rt, loop in started:
        await rt.shutdown(grace_period=0.2)
        await asyncio.wait_for(loop, 2)


async def test_stream_order_ids_and_final_event(serving: Any) -> None:
    rt, _, _ = two_agent_runtime(
        [[send_request("worker", "w")], [task_complete("streamed answer")]],
        [[send_response("supervisor", "r")]],
    )
    serving(rt)
    events = await collect(rt.stream_task_events(user_message("t1", "hi"), timeout=5))
    names = [e.event for e in events]
    assert names == [
        "new_message",
        "tool_call",
        "new_message",
        "tool_call",
        "new_message",
        "tool_call",
        "task_complete_call",
        "new_message",
        "task_complete",
    ]
    stored = rt.get_task_events("t1")
    assert events[:-1] == stored  # the same records, streamed in order
    assert [e.id for e in events[:-1]] == [str(i) for i in range(1, len(events))]
    final = events[-1]
    assert final.id is None and final not in stored
    data = json.loads(final.data)
    assert set(data) == {"timestamp", "task_id", "response"}
    assert data["task_id"] == "t1" and data["response"] == "streamed answer"
    first = json.loads(events[0].data)
    assert set(first) == {"timestamp", "description", "task_id", "extra_data"}
    assert first["extra_data"]["full_message"]["message"]["body"] == "hi"
    # Compact separators, produced once and shared by every reader.
    assert events[0].data == json.dumps(first, separators=(",", ":"), ensure_ascii=False)
    assert events[0].data is stored[0].data


async def test_pings_during_silence(serving: Any) -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("slow answer")]])
    sup.sleep = 0.3
    serving(rt)
    events = await collect(rt.stream_task_events(user_message("t1"), timeout=5, ping_interval=0.05))
    pings = [e for e in events if e.event == "ping"]
    assert len(pings) >= 3
    assert all(set(json.loads(p.data)) == {"timestamp", "task_id"} for p in pings)
    assert all(json.loads(p.data)["task_id"] == "t1" for p in pings)
    assert all(p.event != "ping" for p in rt.get_task_events("t1"))
    assert events[-1].event == "task_complete"
    # Pings only fill silence: the first real event precedes them.
    assert events[0].event == "new_message"


async def test_breakpoint_ends_the_stream_promptly(serving: Any) -> None:
    async def weather(args: dict[str, Any]) -> str:
        return "x"

    rt, _, _ = two_agent_runtime(
        [[tool_call("get_weather", {"city": "Paris"}, call_id="bp-1")]],
        actions={"get_weather": weather},
        breakpoint_tools=["get_weather"],
    )
    serving(rt)
    started = time.monotonic()
    events = await collect(
        rt.stream_task_events(user_message("t1"), timeout=30, ping_interval=30), limit=5
    )
    assert time.monotonic() - started < 1.0
    assert [e.event for e in events][-2:] == ["breakpoint_tool_call", "task_complete"]
    response = json.loads(json.loads(events[-1].data)["response"])
    assert response[0]["call_id"] == "bp-1"


async def test_stream_timeout_is_enforced(serving: Any) -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("too late")]])
    sup.sleep = 2.0
    serving(rt)
    started = time.monotonic()
    events = await collect(
        rt.stream_task_events(user_message("t1"), timeout=0.2, ping_interval=10), limit=3
    )
    assert time.monotonic() - started < 1.5
    final = events[-1]
    assert final.event == "task_error"
    assert json.loads(final.data)["response"] == "The task timed out."
    assert [e.event for e in events].count("task_error") == 1  # one frame, as documented
    assert any(
        e.event == "task_error" and e.description == "timeout for task 't1'"
        for e in rt.get_task_events("t1")
    )


async def test_stream_setup_error_is_a_single_task_error(serving: Any) -> None:
    rt, _, _ = two_agent_runtime([[task_complete("x")]])
    serving(rt)
    events = await collect(
        rt.stream_task_events(user_message("nope"), resume_from="user_response", timeout=5)
    )
    assert [e.event for e in events] == ["task_error"]
    assert json.loads(events[0].data)["response"] == "task 'nope' not found"


async def test_resumed_stream_replays_only_new_events(serving: Any) -> None:
    rt, _, _ = two_agent_runtime([[task_complete("one")], [task_complete("two")]])
    serving(rt)
    first = await collect(rt.stream_task_events(user_message("t1", "q1"), timeout=5))
    second = await collect(
        rt.stream_task_events(user_message("t1", "q2"), resume_from="user_response", timeout=5)
    )
    assert json.loads(second[-1].data)["response"] == "two"
    first_ids = {e.id for e in first if e.id}
    second_ids = [e.id for e in second if e.id]
    assert second_ids and not first_ids & set(second_ids)
    assert int(second_ids[0]) == len(first) and second[0].event == "new_message"
    assert "q2" in json.loads(second[0].data)["description"]
