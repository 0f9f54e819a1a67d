"""mail.core.deadlines: many waiters' timeouts on one loop timer, and the runtime's use of it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate
from mail.core.deadlines import _COMPACT_MIN, Deadlines


async def test_each_future_expires_at_its_own_deadline() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    late, early, never = loop.create_future(), loop.create_future(), loop.create_future()
    started = time.monotonic()
    deadlines.add(0.4, late)
    deadlines.add(0.1, early)  # earlier than the armed timer: it moves forward
    deadlines.add(10.0, never)
    with pytest.raises(TimeoutError):
        await early
    assert 0.08 <= time.monotonic() - started and not late.done()
    with pytest.raises(TimeoutError):
        await late
    assert time.monotonic() - started >= 0.38 and not never.done()
    deadlines.answered(early)
    deadlines.answered(late)
    never.set_result(None)
    deadlines.answered(never)
    state = deadlines._current
    assert state is not None and state.heap == [] and state.timer is None  # nothing left


async def test_answered_futures_leave_no_timer_and_are_compacted() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    keep = loop.create_future()
    deadlines.add(3600, keep)  # one caller still waiting holds the timer
    answered = []
    for _ in range(4 * _COMPACT_MIN):
        future = loop.create_future()
        deadlines.add(3600, future)
        future.set_result(None)
        deadlines.answered(future)
        answered.append(future)
    state = deadlines._current
    assert state is not None
    # Answered entries never make up more than half of a heap past the compaction size.
    assert len(state.heap) <= 2 * _COMPACT_MIN
    keep.cancel()
    deadlines.answered(keep)
    assert state.heap == [] and state.timer is None


async def test_a_waiter_closed_without_its_answer_cancels_its_future() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    future = loop.create_future()
    deadlines.add(0.05, future)
    deadlines.answered(future)
    assert future.cancelled()
    await asyncio.sleep(0.1)  # the timer finds nothing to expire (no unretrieved exception)


def test_deadlines_of_two_loops_stay_apart() -> None:
    deadlines = Deadlines()

    async def wait(delay: float) -> float:
        future = asyncio.get_running_loop().create_future()
        started = time.monotonic()
        deadlines.add(delay, future)
        try:
            await future
        except TimeoutError:
            pass
        deadlines.answered(future)
        return time.monotonic() - started

    assert asyncio.run(wait(0.05)) >= 0.04
    assert asyncio.run(wait(0.05)) >= 0.04  # a new loop arms its own timer


def _swarm(delay: float) -> Any:
    finish = AgentToolCall(
        tool_name="task_complete",
        tool_args={"finish_message": "done"},
        tool_call_id="c",
        completion={"role": "assistant", "content": None},
    )

    def factory(**_: Any) -> Any:
        async def agent(history: Any, tool_choice: Any) -> Any:
            await asyncio.sleep(delay)
            return None, [finish]

        return agent

    template = MAILSwarmTemplate(
        name="deadlines",
        version="1.0.0",
        agents=[
            MAILAgentTemplate(
                "supervisor", factory, [], enable_entrypoint=True, can_complete_tasks=True
            )
        ],
        actions=[],
        entrypoint="supervisor",
    )
    return template.instantiate({}, user_id="u")


async def test_post_message_times_out_among_callers_answered_in_time() -> None:
    swarm = _swarm(0.3)
    loop_task = asyncio.create_task(swarm.run_continuous())
    try:
        quick = [swarm.post_message("go", timeout=30) for _ in range(5)]
        slow = swarm.post_message("go", timeout=0.1)
        results = await asyncio.gather(slow, *quick)
        assert results[0][0]["message"]["subject"] == "::task_timeout::"
        assert all(r[0]["message"]["body"] == "done" for r in results[1:])
        state = swarm.runtime.waiters.deadlines._current
        assert state.heap == [] and state.timer is None  # every caller answered: no timer
    finally:
        await swarm.shutdown()
        await loop_task
