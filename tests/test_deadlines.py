"""mail.core.deadlines: many waiters' timeouts on one loop timer, and the runtime's use of it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mail.core.deadlines import _COMPACT_MIN, Deadlines
from support.one_agent_swarm import FINISH, one_agent_swarm


async def test_each_future_expires_at_its_own_deadline() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    late, early, never = loop.create_future(), loop.create_future(), loop.create_future()
    started = time.monotonic()
    late_entry = deadlines.add(0.4, late)
    early_entry = deadlines.add(0.1, early)  # earlier than the armed timer: it moves forward
    never_entry = deadlines.add(10.0, never)
    with pytest.raises(TimeoutError):
        await early
    assert 0.08 <= time.monotonic() - started and not late.done()
    with pytest.raises(TimeoutError):
        await late
    assert time.monotonic() - started >= 0.38 and not never.done()
    deadlines.answered(early, early_entry)
    deadlines.answered(late, late_entry)
    never.set_result(None)
    deadlines.answered(never, never_entry)
    state = deadlines._current
    assert state is not None and state.heap == [] and state.timer is None  # nothing left


async def test_answered_futures_leave_no_timer_and_are_compacted() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    keep = loop.create_future()
    keep_entry = deadlines.add(3600, keep)  # one caller still waiting holds the timer
    answered = []
    for _ in range(4 * _COMPACT_MIN):
        future = loop.create_future()
        entry = deadlines.add(3600, future)
        future.set_result(None)
        deadlines.answered(future, entry)
        answered.append(future)
    state = deadlines._current
    assert state is not None
    # Answered entries never make up more than half of a heap past the compaction size.
    assert len(state.heap) <= 2 * _COMPACT_MIN
    keep.cancel()
    deadlines.answered(keep, keep_entry)
    assert state.heap == [] and state.timer is None


async def test_a_waiter_closed_without_its_answer_cancels_its_future() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    future = loop.create_future()
    entry = deadlines.add(0.05, future)
    deadlines.answered(future, entry)
    assert future.cancelled()
    await asyncio.sleep(0.1)  # the timer finds nothing to expire (no unretrieved exception)


def test_deadlines_of_two_loops_stay_apart() -> None:
    deadlines = Deadlines()

    async def wait(delay: float) -> float:
        future = asyncio.get_running_loop().create_future()
        started = time.monotonic()
        entry = deadlines.add(delay, future)
        try:
            await future
        except TimeoutError:
            pass
        deadlines.answered(future, entry)
        return time.monotonic() - started

    assert asyncio.run(wait(0.05)) >= 0.04
    assert asyncio.run(wait(0.05)) >= 0.04  # a new loop arms its own timer


def _swarm(delay: float) -> Any:
    async def agent(history: Any, tool_choice: Any) -> Any:
        await asyncio.sleep(delay)
        return None, [FINISH]

    return one_agent_swarm("deadlines", agent)


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


async def _expires(future: asyncio.Future[Any], within: float = 5.0) -> bool:
    """Whether `future` is expired by its deadline (TimeoutError) within `within` seconds."""
    await asyncio.wait([future], timeout=within)
    return future.done() and not future.cancelled() and isinstance(future.exception(), TimeoutError)


async def test_futures_answered_in_one_pass_do_not_drop_live_deadlines_at_compaction() -> None:
    # Many callers answered in one loop pass (a burst of answers) resume one by one in the
    # next: the first ones' compaction drops every answered entry, the later ones' answers
    # must not count again against the entries still waiting.
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    live = [loop.create_future() for _ in range(50)]
    live_entries = [deadlines.add(0.2, future) for future in live]
    answered = [loop.create_future() for _ in range(3 * _COMPACT_MIN)]
    entries = [deadlines.add(3600, future) for future in answered]
    for future in answered:  # all answered in one pass
        future.set_result(None)
    for future, entry in zip(answered, entries, strict=True):  # their waiters resume
        deadlines.answered(future, entry)
    # Each expires at its own deadline (a few microseconds apart: maybe in later passes).
    assert all([await _expires(future) for future in live])
    for future, entry in zip(live, live_entries, strict=True):
        deadlines.answered(future, entry)
    state = deadlines._current
    assert state is not None and state.heap == [] and state.timer is None


async def test_an_answer_in_the_pass_of_its_deadline_keeps_the_next_deadline() -> None:
    # The timer fires for `first` in the pass its answer came in, before its waiter resumed:
    # the entry leaves the heap then, and the waiter's later word must not count it again.
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    first, second = loop.create_future(), loop.create_future()
    first_entry = deadlines.add(0.05, first)
    second_entry = deadlines.add(0.3, second)
    state = deadlines._current
    assert state is not None
    armed_at = state.timer_at  # first's deadline
    time.sleep(0.1)  # block the loop: the answer and the due timer meet in one pass
    first.set_result(None)
    # The next pass runs the timer after this task's step; the one after, the waiter's.
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert state.timer_at > armed_at  # the timer ran before `first`'s waiter resumed
    deadlines.answered(first, first_entry)
    assert await _expires(second)
    deadlines.answered(second, second_entry)
    assert state.heap == [] and state.timer is None


async def test_a_burst_of_answers_leaves_a_waiting_callers_timeout_in_place() -> None:
    # 150 callers of one swarm answered at once (their agents held at a gate), one more caller
    # whose agent never answers: its timeout still ends its wait.
    quick_callers = 150
    gate, all_started = asyncio.Event(), asyncio.Event()
    started = 0

    async def agent(history: Any, tool_choice: Any) -> Any:
        nonlocal started
        started += 1
        if started == quick_callers + 1:
            all_started.set()
        if "hang" in str(history[-1]):
            await asyncio.Event().wait()
        await gate.wait()
        return None, [FINISH]

    swarm = one_agent_swarm("deadlines", agent)
    loop_task = asyncio.create_task(swarm.run_continuous())
    try:
        quick = [
            asyncio.ensure_future(swarm.post_message("go", timeout=3600))
            for _ in range(quick_callers)
        ]
        # (Long enough for its agent to start after the 150 others on a loaded machine.)
        hanging = asyncio.ensure_future(swarm.post_message("hang", timeout=5.0))
        await asyncio.wait_for(all_started.wait(), 60)
        gate.set()
        answers = await asyncio.wait_for(asyncio.gather(*quick), 60)
        assert all(a[0]["message"]["body"] == "done" for a in answers)
        await asyncio.wait([hanging], timeout=30)
        assert hanging.done(), "the hanging caller's timeout was lost"
        assert hanging.result()[0]["message"]["subject"] == "::task_timeout::"
    finally:
        await swarm.shutdown()
        await loop_task


def test_an_answer_in_a_loop_not_last_used_still_frees_its_entry_and_timer() -> None:
    # A runtime used from two loops in turn: an answer in the loop used before (not the
    # deadlines' current one) still leaves that loop with no entry and no timer, instead of
    # holding the answered future until its hour-long deadline.
    deadlines = Deadlines()
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:

        async def add() -> tuple[asyncio.Future[Any], Any]:
            future = asyncio.get_running_loop().create_future()
            return future, deadlines.add(3600, future)

        async def answer(future: asyncio.Future[Any], entry: Any) -> None:
            future.set_result(None)
            deadlines.answered(future, entry)

        waiting, waiting_entry = first.run_until_complete(add())
        state = deadlines._current
        assert state is not None and state.timer is not None
        other, other_entry = second.run_until_complete(add())
        second.run_until_complete(answer(other, other_entry))
        first.run_until_complete(answer(waiting, waiting_entry))
        assert state.heap == [] and state.timer is None
    finally:
        first.close()
        second.close()
