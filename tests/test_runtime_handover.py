"""Turns of one task hand over to each other (TurnRunner.run_turns).

A turn that waited for its model and whose messages start a turn of the same task runs that
turn itself, in the same asyncio task, as it ends. A turn that never waited starts its next
turns as new asyncio tasks, so agents that answer at once cannot hold the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    make_runtime,
    run_task,
    send_request,
    send_response,
    task_complete,
    two_agent_runtime,
)


def _recording(seen: list[asyncio.Task[Any] | None], calls: list[Any]) -> Any:
    def step(history: Any, tool_choice: Any) -> list[Any]:
        seen.append(asyncio.current_task())
        return calls

    return step


def _runtime(seen: list[asyncio.Task[Any] | None], sleep: float) -> Any:
    rt, sup, wrk = two_agent_runtime(
        [
            _recording(seen, [send_request("worker", "go")]),
            _recording(seen, [task_complete("done")]),
        ],
        [_recording(seen, [send_response("supervisor", "result")])],
    )
    sup.sleep = wrk.sleep = sleep
    return rt


async def test_turns_after_a_model_wait_run_in_one_asyncio_task() -> None:
    seen: list[asyncio.Task[Any] | None] = []
    rt = _runtime(seen, sleep=0.001)
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    assert len(seen) == 3  # supervisor, worker, supervisor
    assert seen[0] is seen[1] is seen[2]
    assert not rt._turns and not rt._turns_by_task  # the chain's bookkeeping is gone


async def test_instant_turns_start_new_asyncio_tasks() -> None:
    seen: list[asyncio.Task[Any] | None] = []
    rt = _runtime(seen, sleep=0.0)
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    assert len(seen) == 3
    assert len({id(t) for t in seen}) == 3


async def test_a_handed_over_turn_starts_before_other_ready_work() -> None:
    """The worker's model call starts before a callback that was ready when the supervisor's
    model call returned: the hand-over does not queue behind the loop's ready callbacks."""
    order: list[str] = []
    seen: list[asyncio.Task[Any] | None] = []
    rt, sup, wrk = two_agent_runtime(
        [
            _recording(seen, [send_request("worker", "go")]),
            _recording(seen, [task_complete("done")]),
        ],
        [_recording(seen, [send_response("supervisor", "result")])],
    )
    loop = asyncio.get_running_loop()
    inner = sup.__call__

    async def supervisor(history: Any, tool_choice: Any) -> Any:
        result = await inner(history, tool_choice)
        if len(sup.calls) == 1:
            loop.call_soon(order.append, "other ready work")
        return result

    async def worker(history: Any, tool_choice: Any) -> Any:
        order.append("worker model call")
        return await wrk(history, tool_choice)

    sup.sleep = 0.001
    rt.agents["supervisor"].function = supervisor
    rt.agents["worker"].function = worker
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    assert order == ["worker model call", "other ready work"]


async def test_no_hand_over_while_other_turns_of_the_task_run() -> None:
    """Two workers answer after the same model wait: the supervisor's next turn waits for
    the second answer's turn to end and reads both answers in one batch (a turn handed over
    to the first worker's answer would run on one answer and call the model again)."""
    sup = ScriptedAgent(
        "supervisor",
        [
            [send_request("w1", "go"), send_request("w2", "go")],
            [task_complete("done")],
        ],
    )
    w1 = ScriptedAgent("w1", [[send_response("supervisor", "one")]], sleep=0.01)
    w2 = ScriptedAgent("w2", [[send_response("supervisor", "two")]], sleep=0.01)
    sup.sleep = 0.001
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["w1", "w2"], True),
            "w1": AgentSpec(w1, ["supervisor"]),
            "w2": AgentSpec(w2, ["supervisor"]),
        }
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    assert len(sup.calls) == 2
    second = [h["content"] for h in sup.calls[1].history[-2:]]
    assert any("<body>one</body>" in c for c in second)
    assert any("<body>two</body>" in c for c in second)
