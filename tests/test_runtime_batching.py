"""Batched delivery: what reaches a busy agent is shown to it together at its next turn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mail.api import MAILSwarmTemplate
from mail.core.runtime import MAILRuntime
from mail.core.runtime_batching import AgentInboxes
from mail.core.system_messages import system_response
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
)
from test_runtime_delivery import agent_msg

WORKERS = 20


def _incoming(history: list[dict[str, Any]]) -> list[str]:
    return [
        str(item["content"])
        for item in history
        if item.get("role") == "user" and "<incoming_message>" in str(item.get("content"))
    ]


def _answers(history: list[dict[str, Any]]) -> int:
    return sum(1 for text in _incoming(history) if "<body>answer from" in text)


def fan_in_runtime(
    *, broadcast: bool = False, batch_delivery: bool = True, latency: float = 0.02
) -> tuple[MAILRuntime, ScriptedAgent]:
    """A supervisor that asks every worker at once and completes when all have answered."""
    names = [f"w{i}" for i in range(WORKERS)]

    def supervise(history: list[dict[str, Any]], _choice: Any) -> list[Any]:
        if len(_incoming(history)) == 1:  # the user's message
            if broadcast:
                return [send_broadcast("work, everyone", subject="job")]
            return [send_request(name, "work") for name in names]
        got = _answers(history)
        if got >= WORKERS:
            return [task_complete(f"{got} answers")]
        return [tool_call("await_message", {"reason": f"{got} of {WORKERS}"})]

    def answer(name: str) -> Any:
        def step(_history: list[dict[str, Any]], _choice: Any) -> list[Any]:
            return [send_response("supervisor", f"answer from {name}")]

        return step

    sup = ScriptedAgent("supervisor", default=supervise, sleep=latency)
    agents = {"supervisor": AgentSpec(sup, names, True)}
    for name in names:
        agents[name] = AgentSpec(
            ScriptedAgent(name, default=answer(name), sleep=latency), ["supervisor"]
        )
    return make_runtime(agents, batch_delivery=batch_delivery), sup


@pytest.mark.parametrize("broadcast", [False, True], ids=["requests", "broadcast"])
async def test_fan_in_is_read_in_a_few_turns(broadcast: bool) -> None:
    rt, sup = fan_in_runtime(broadcast=broadcast)
    response = await run_task(rt, timeout=20)
    assert response["message"]["body"] == f"{WORKERS} answers"
    # The first call sends the work; the answers arrive while nothing or one call runs.
    assert len(sup.calls) <= 4, [len(_incoming(c.history)) for c in sup.calls]
    # Every answer is its own incoming message in the history.
    assert _answers(sup.live_histories[-1]) == WORKERS
    # One new_message event per delivered message, as without batching.
    to_supervisor = [
        e
        for e in events_named(rt, "t1", "new_message")
        if e.extra_data["full_message"]["message"].get("recipient", {}).get("address")
        == "supervisor"
        and "answer from" in e.extra_data["full_message"]["message"]["body"]
    ]
    assert len(to_supervisor) == WORKERS


async def test_without_batch_delivery_every_message_gets_its_own_call() -> None:
    rt, sup = fan_in_runtime(batch_delivery=False, latency=0.0)
    response = await run_task(rt, timeout=20)
    assert response["message"]["body"] == f"{WORKERS} answers"
    assert len(sup.calls) == WORKERS + 1
    assert all(len(_incoming(c.history)) == i + 1 for i, c in enumerate(sup.calls))


async def test_messages_that_arrive_during_a_turn_wait_for_the_next_one() -> None:
    """A running turn is never joined midway; the late messages make up the next turn."""
    gate = asyncio.Event()
    worker = ScriptedAgent("worker", default=[send_response("supervisor", "ok")])
    worker_calls: list[list[str]] = []

    async def gated_worker(history: list[dict[str, Any]], choice: Any) -> Any:
        worker_calls.append([_subject(text) for text in _incoming(history)])
        if len(worker_calls) == 1:
            await gate.wait()
        return await worker(history, choice)

    sup = ScriptedAgent("supervisor", default=[tool_call("ignore_broadcast", {})])
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["worker"], True),
            "worker": AgentSpec(gated_worker, ["supervisor"]),
        }
    )
    loop = asyncio.create_task(rt.run_continuous())
    try:
        rt.submit(agent_msg("request", "t1", "supervisor", "worker", "one"))
        await _until(lambda: len(worker_calls) == 1)
        rt.submit(agent_msg("request", "t1", "supervisor", "worker", "two"))
        rt.submit(agent_msg("interrupt", "t1", "supervisor", "worker", "three"))
        await _until(lambda: rt.inboxes.waiting("t1::worker") == 2)
        gate.set()
        await asyncio.wait_for(rt.await_idle(), 5)
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)
    # Second call: the first exchange, then the interrupt (tier 3) before the request (tier 5).
    assert worker_calls == [["one"], ["one", "three", "two"]]


async def test_step_limit_counts_messages_and_one_notice_is_shown() -> None:
    """task_message_limit counts each batched message; the forced turn sees one notice."""

    def supervise(history: list[dict[str, Any]], choice: Any) -> list[Any]:
        if isinstance(choice, dict):
            return [task_complete("forced")]
        if len(_incoming(history)) == 1:
            return [send_request(f"w{i}", "work") for i in range(WORKERS)]
        return [tool_call("await_message", {})]

    sup = ScriptedAgent("supervisor", default=supervise)
    agents = {"supervisor": AgentSpec(sup, [f"w{i}" for i in range(WORKERS)], True)}
    for i in range(WORKERS):
        agents[f"w{i}"] = AgentSpec(
            ScriptedAgent(f"w{i}", default=[send_response("supervisor", "answer")]),
            ["supervisor"],
        )
    rt = make_runtime(agents)
    response = await run_task(rt, max_steps=5, timeout=10)
    assert response["message"]["body"] == "forced"
    forced = sup.calls[-1]
    assert forced.tool_choice == {"type": "function", "name": "task_complete"}
    notices = [t for t in _incoming(forced.history) if "::maximum_steps_reached::" in t]
    assert len(notices) == 1
    # 1 user message + 3 requests fit in the limit of 5; the 4th request (the 5th step, the
    # last call, which is the forced finish's) and every later message were replaced.
    delivered_requests = [
        e
        for e in events_named(rt, "t1", "new_message")
        if e.extra_data["full_message"]["message"]["subject"] == "Req"
    ]
    assert len(delivered_requests) == 3


# ------------------------------------------------------------------------------ the option


def _swarm_entry(**extra: Any) -> dict[str, Any]:
    from tests.support.stub_agents import stub_swarms_json

    return {**stub_swarms_json()[0], **extra}


def test_batch_delivery_is_on_by_default_and_can_be_turned_off() -> None:
    on = MAILSwarmTemplate.from_swarms_json(_swarm_entry())
    assert on.batch_delivery is True
    assert on.instantiate({}, user_id="u").runtime.batch_delivery is True
    off = MAILSwarmTemplate.from_swarms_json(_swarm_entry(batch_delivery=False))
    assert off.batch_delivery is False
    assert off.instantiate({}, user_id="u").runtime.batch_delivery is False
    assert off.to_swarm_json()["batch_delivery"] is False
    again = MAILSwarmTemplate.from_swarms_json(off.to_swarm_json())
    assert again.batch_delivery is False


def test_batch_delivery_must_be_a_boolean() -> None:
    with pytest.raises(ValueError, match="batch_delivery"):
        MAILSwarmTemplate.from_swarms_json(_swarm_entry(batch_delivery="no"))


# ------------------------------------------------------------------------------ inboxes


def test_inbox_orders_by_priority_then_arrival() -> None:
    inboxes = AgentInboxes()
    key = "t::a"
    assert inboxes.add(key, agent_msg("request", "t", "b", "a", "r1")) is True
    # Joins the turn already started for the key.
    assert inboxes.add(key, agent_msg("broadcast", "t", "b", "a", "b1")) is False
    assert inboxes.add(key, agent_msg("request", "t", "b", "a", "r2")) is False
    assert inboxes.add(key, system_response("s", "t", "a", "::note::", "n")) is False
    taken = [m["message"]["subject"] for m in inboxes.take(key)]
    assert taken == ["::note::", "b1", "r1", "r2"]
    assert inboxes.take(key) == []
    # The next delivery starts a new turn.
    assert inboxes.add(key, agent_msg("request", "t", "b", "a", "r3")) is True


def test_inbox_without_batching_hands_out_one_message_per_turn_in_arrival_order() -> None:
    inboxes = AgentInboxes(batch=False)
    key = "t::a"
    assert inboxes.add(key, agent_msg("request", "t", "b", "a", "r1")) is True
    assert inboxes.add(key, system_response("s", "t", "a", "::note::", "n")) is True
    assert [m["message"]["subject"] for m in inboxes.take(key)] == ["r1"]
    assert [m["message"]["subject"] for m in inboxes.take(key)] == ["::note::"]
    assert inboxes.take(key) == []


def test_inbox_keeps_only_the_newest_step_limit_notice() -> None:
    inboxes = AgentInboxes()
    key = "t::a"
    for body in ("first", "second"):
        inboxes.add(key, system_response("s", "t", "a", "::maximum_steps_reached::", body))
    inboxes.add(key, agent_msg("request", "t", "b", "a", "r1"))
    taken = inboxes.take(key)
    assert [m["message"]["body"] for m in taken] == ["second", ""]


# ------------------------------------------------------------------------------ helpers


def _subject(text: str) -> str:
    return text.split("<subject>")[1].split("</subject>")[0]


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)
