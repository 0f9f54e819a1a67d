"""Shutdown, per-agent serialisation vs concurrency, event records and MAILTask."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from typing import Any

import pytest

from mail.core.events import TaskEvent
from mail.core.tasks import MAILTask
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    events_named,
    make_runtime,
    run_task,
    send_broadcast,
    send_request,
    send_response,
    task_complete,
    tool_call,
    two_agent_runtime,
    user_message,
)
from support.v13_swarm import until

# ------------------------------------------------------------------------------ shutdown


async def test_shutdown_lets_in_flight_turns_finish_within_the_grace_period() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("finished during shutdown")]])
    sup.sleep = 1.0
    loop = asyncio.create_task(rt.run_continuous())
    waiter = asyncio.create_task(rt.submit_and_wait(user_message("t1"), timeout=30))
    await until(lambda: len(sup.calls) == 1)
    assert sup.calls[0].exit == 0.0  # mid-call
    await asyncio.wait_for(rt.shutdown(grace_period=10), 15)
    await asyncio.wait_for(loop, 1)
    assert sup.calls[0].exit > 0.0
    # The turn completed normally: its history is whole and the waiter got the real answer.
    assert sup.live_histories[0][-1]["content"] == "SUCCESS: task completed"
    response = await asyncio.wait_for(waiter, 1)
    assert response["message"]["body"] == "finished during shutdown"
    assert [e.event for e in rt.get_task_events("*")] == ["shutdown_requested"]


async def test_shutdown_cancels_turns_that_outlive_the_grace_period() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("never")]])
    sup.sleep = 30
    loop = asyncio.create_task(rt.run_continuous())
    waiter = asyncio.create_task(rt.submit_and_wait(user_message("t1"), timeout=60))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await asyncio.wait_for(rt.shutdown(grace_period=0.1), 10)
    assert time.monotonic() - started < 5.0  # not the turn's 30 s
    await asyncio.wait_for(loop, 1)
    assert rt._turns == set()
    response = await asyncio.wait_for(waiter, 1)
    assert response["msg_type"] == "broadcast_complete"
    assert response["message"]["subject"] == "::shutdown_requested::"


async def test_run_task_waiter_gets_a_response_on_shutdown() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("never")]])
    sup.sleep = 30
    pending = asyncio.create_task(rt.run_task(user_message("t1"), timeout=60))
    await asyncio.sleep(0.05)
    await asyncio.wait_for(rt.shutdown(grace_period=0.05), 2)
    response = await asyncio.wait_for(pending, 2)
    assert response["message"]["subject"] == "::shutdown_requested::"


async def test_shutdown_is_idempotent_and_stops_the_loop() -> None:
    rt, _, _ = two_agent_runtime([[task_complete("x")]])
    loop = asyncio.create_task(rt.run_continuous())
    await asyncio.sleep(0)
    await rt.shutdown()
    await rt.shutdown()
    await asyncio.wait_for(loop, 1)
    assert loop.done() and loop.exception() is None
    assert len(events_named(rt, "*", "shutdown_requested")) == 1


# ------------------------------------------------------------------------------ concurrency


async def test_one_agents_turns_on_one_task_never_overlap() -> None:
    rt, _, wrk = two_agent_runtime(
        [
            [send_request("worker", "job A"), send_request("worker", "job B")],
            [tool_call("ignore_broadcast", {})],
            [task_complete("both done")],
        ],
        [[send_response("supervisor", "A done")], [send_response("supervisor", "B done")]],
        batch_delivery=False,  # one turn per message, so there are two turns to compare
    )
    wrk.sleep = 0.05
    response = await run_task(rt)
    assert response["message"]["body"] == "both done"
    first, second = wrk.calls
    assert second.enter >= first.exit
    # The second turn saw the first turn's complete exchange, in order.
    roles = [e.get("role") for e in second.history]
    assert roles == ["user", "assistant", "tool", "user"]
    assert "job A" in second.history[0]["content"] and "job B" in second.history[3]["content"]


async def test_same_agent_runs_concurrently_for_different_tasks() -> None:
    sup = ScriptedAgent("supervisor", default=[task_complete("ok")], sleep=1.0)
    rt = make_runtime({"supervisor": AgentSpec(sup, [], True)})
    loop = asyncio.create_task(rt.run_continuous())
    try:
        started = time.monotonic()
        results = await asyncio.wait_for(
            asyncio.gather(*(rt.submit_and_wait(user_message(f"t{i}"), 30) for i in range(5))),
            30,
        )
        elapsed = time.monotonic() - started
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)
    assert [r["message"]["body"] for r in results] == ["ok"] * 5
    assert elapsed < 3.0  # five 1 s calls overlapped (one after another: 5 s)
    enters = sorted(c.enter for c in sup.calls)
    exits = sorted(c.exit for c in sup.calls)
    assert enters[-1] < exits[0]


async def test_broadcast_recipients_run_concurrently() -> None:
    sup = ScriptedAgent(
        "supervisor",
        [[send_broadcast("all hands")], [tool_call("ignore_broadcast", {})], [task_complete()]],
    )
    a = ScriptedAgent("a", [[send_response("supervisor", "a")]], sleep=0.1)
    b = ScriptedAgent("b", [[send_response("supervisor", "b")]], sleep=0.1)
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["a", "b"], True),
            "a": AgentSpec(a, ["supervisor"]),
            "b": AgentSpec(b, ["supervisor"]),
        }
    )
    await run_task(rt)
    assert a.calls[0].enter < b.calls[0].exit and b.calls[0].enter < a.calls[0].exit


# ------------------------------------------------------------------------------ events


async def test_tool_call_events_carry_reasoning_reference_and_preamble() -> None:
    rt, _, _ = two_agent_runtime(
        [
            [
                tool_call("ignore_broadcast", {}, call_id="c1", reasoning=["think", "  ", "more"]),
                tool_call("ignore_broadcast", {}, call_id="c2", preamble="Let me finish."),
                tool_call("ignore_broadcast", {}, call_id="c3", reasoning=["", " "]),
                task_complete("ok", call_id="c4", reasoning=["final thought"]),
            ]
        ]
    )
    await run_task(rt)
    extras = [e.extra_data for e in events_named(rt, "t1", "tool_call")]
    assert extras[0] == {
        "tool_name": "ignore_broadcast",
        "tool_args": {},
        "tool_call_id": "c1",
        "reasoning": "think\n\nmore",
    }
    assert extras[1]["reasoning_ref"] == "c1" and extras[1]["preamble"] == "Let me finish."
    assert "reasoning" not in extras[1]
    assert extras[2]["reasoning_ref"] == "c1" and "reasoning" not in extras[2]
    assert extras[3]["reasoning"] == "final thought" and "reasoning_ref" not in extras[3]
    assert "preamble" not in extras[0]
    descriptions = [e.description for e in events_named(rt, "t1", "tool_call")]
    assert descriptions == [
        "agent supervisor called ignore_broadcast",
        "agent supervisor called ignore_broadcast",
        "agent supervisor called ignore_broadcast",
        "agent supervisor called task_complete",
    ]


async def test_new_message_event_description_and_full_message() -> None:
    rt, _, _ = two_agent_runtime([[task_complete("ok")]])
    await run_task(rt, body="ping?")
    first = rt.get_task_events("t1")[0]
    assert first.event == "new_message"
    assert first.description.startswith("sending message:\n\n<incoming_message>\n")
    assert "<body>ping?</body>" in first.description
    assert first.extra_data["full_message"]["message"]["body"] == "ping?"
    assert first.task_id == "t1" and first.timestamp.endswith("+00:00")


def test_task_event_records_round_trip() -> None:
    event = TaskEvent("tool_call", "t9", lambda: "lazy description", {"tool_name": "x"})
    event.id = "7"
    raw = event.to_record()
    assert raw == {
        "event": "tool_call",
        "id": "7",
        "data": event.data,
        "retry": None,
        "comment": None,
    }
    assert json.loads(raw["data"]) == {
        "timestamp": event.timestamp,
        "description": "lazy description",
        "task_id": "t9",
        "extra_data": {"tool_name": "x"},
    }
    parsed = event.to_record(parsed=True)
    assert parsed["data"]["description"] == "lazy description"
    again = TaskEvent.from_record(raw)
    assert (again.event, again.id, again.data) == ("tool_call", "7", event.data)
    assert again.description == "lazy description" and again.extra_data == {"tool_name": "x"}


# ------------------------------------------------------------------------------ tasks


async def test_task_owner_contributors_and_to_dict() -> None:
    rt, _, _ = two_agent_runtime([[send_request("worker", "later"), task_complete("done")]])
    await run_task(rt)
    task = rt.get_task_by_id("t1")
    assert task is not None
    assert rt.this_owner == "user:u1@testswarm"
    assert task.task_owner == "user:u1@testswarm"
    assert task.task_contributors == ["user:u1@testswarm"]
    record = task.to_dict()
    assert set(record) == {
        "task_id",
        "task_owner",
        "task_contributors",
        "start_time",
        "is_running",
        "completed",
        "remote_swarms",
        "title",
        "task_message_queue",
        "pending_reviews",  # action review (docs/review.md): [] when nothing waits
        "state",  # the one task state is_running and completed derive from
        "events",
    }
    assert record["pending_reviews"] == []
    assert record["task_id"] == "t1" and record["completed"] and not record["is_running"]
    assert record["remote_swarms"] == [] and record["title"] is None
    assert datetime.datetime.fromisoformat(record["start_time"]).tzinfo is not None
    assert [i["message"]["message"]["body"] for i in record["task_message_queue"]] == ["later"]
    assert {"priority", "seq", "message"} == set(record["task_message_queue"][0])
    assert len(record["events"]) == len(task.events)
    assert all(isinstance(e["data"], str) for e in record["events"])
    assert [e["id"] for e in record["events"]] == [str(i + 1) for i in range(len(task.events))]
    json.dumps(record)  # JSON-able as it is
    assert "events" not in task.to_dict(include_events=False)


def test_mail_task_state_transitions_and_store_record() -> None:
    task = MAILTask("t", "user:u@s", ["agent:x@other"])
    assert task.task_contributors == ["user:u@s", "agent:x@other"]
    assert task.is_running and not task.completed
    task.mark_complete()
    assert task.completed and not task.is_running
    task.resume()
    assert task.is_running and not task.completed
    task.add_contributor("agent:x@other")
    task.add_contributor("swarm:y@z")
    assert task.task_contributors == ["user:u@s", "agent:x@other", "swarm:y@z"]
    task.queue_stash([{"priority": 5, "seq": 1, "message": {}}])
    assert task.queue_take() == [{"priority": 5, "seq": 1, "message": {}}]
    assert task.task_message_queue == []
    task.remote_swarms.add("far")
    task.title = "A title"
    copy = MAILTask.from_store_record(task.to_store_record())
    assert copy.to_store_record() == task.to_store_record()
    assert copy.start_time == task.start_time


async def test_event_signal_fires_on_the_next_event() -> None:
    task = MAILTask("t", "user:u@s")
    signal = task.event_signal()
    assert not signal.is_set()
    task.add_event(TaskEvent("x", "t", "d"))
    assert signal.is_set()
    assert not task.event_signal().is_set()
    assert task.events[0].id == "1"


def test_pending_requests_and_history_keys() -> None:
    rt, _, _ = two_agent_runtime([[task_complete()]])
    history: list[Any] = rt.history_for("t5", "worker")
    assert rt.agent_histories["t5::worker"] is history
    assert rt.pending_requests == {}


async def test_submit_and_wait_timeout_returns_task_timeout() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("too slow")]])
    sup.sleep = 30.0
    loop = asyncio.create_task(rt.run_continuous())
    try:
        started = time.monotonic()
        response = await asyncio.wait_for(rt.submit_and_wait(user_message("t1"), timeout=0.1), 10)
        assert time.monotonic() - started < 5.0  # not the turn's 30 s
    finally:
        await rt.shutdown(grace_period=0.05)
        await asyncio.wait_for(loop, 2)
    assert response["msg_type"] == "broadcast_complete"
    assert response["message"]["subject"] == "::task_timeout::"
    assert response["message"]["body"] == "The task timed out."
    assert [e.description for e in events_named(rt, "t1", "task_error")] == [
        "timeout for task 't1'"
    ]


async def test_submissions_after_shutdown_are_answered_at_once() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("never")]])
    await rt.shutdown()
    started = time.monotonic()
    response = await asyncio.wait_for(rt.run_task(user_message("late"), timeout=30), 35)
    elapsed = time.monotonic() - started
    # Nobody will ever serve the task: say so now instead of after the whole timeout.
    assert elapsed < 10, f"waited {elapsed:.2f}s for a shut-down runtime"
    assert response["msg_type"] == "broadcast_complete"
    assert response["message"]["subject"] in ("::shutdown_requested::", "::task_error::")
    assert sup.calls == []


async def test_a_second_loop_on_the_same_runtime_is_refused() -> None:
    rt, _, _ = two_agent_runtime([[task_complete("x")]])
    loop = asyncio.create_task(rt.run_continuous())
    await asyncio.sleep(0)
    try:
        with pytest.raises(RuntimeError, match="already running"):
            await asyncio.wait_for(rt.run_continuous(), 1)
        response = await asyncio.wait_for(rt.submit_and_wait(user_message("t1"), 5), 6)
        assert response["message"]["body"] == "x"  # the first loop still serves
    finally:
        await rt.shutdown()
        await asyncio.wait_for(loop, 2)
