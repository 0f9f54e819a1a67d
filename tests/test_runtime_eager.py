"""A caller's submitted message starts its first turn in the caller's step (mail.core.eager).

With many callers at once, each caller's model call starts before the next caller is served
(not after every submission and every dispatch of the burst). The turn's first step runs as
its own asyncio task: `asyncio.current_task()`, `asyncio.timeout` and context variables in it
are the turn's, never the caller's; a turn cancelled before its task first ran is cancelled
at its wait, as any task's would be.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from mail.core.eager import start_eagerly
from mail.core.tools import AgentToolCall
from support.scripted_agents import AgentSpec, make_runtime, task_complete, user_message

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("eager_test_mark", default="unset")


def _finish(text: str) -> list[AgentToolCall]:
    call = task_complete(text)
    return [call if isinstance(call, AgentToolCall) else AgentToolCall(**call)]


def _runtime(agent: Any) -> Any:
    return make_runtime({"supervisor": AgentSpec(agent, [], True)})


async def _with_loop(rt: Any, body: Any) -> Any:
    """`body()` awaited while the runtime's continuous loop waits for messages."""
    loop = asyncio.create_task(rt.run_continuous())
    await asyncio.sleep(0)
    try:
        return await asyncio.wait_for(body(), 10)
    finally:
        await rt.shutdown()
        await loop


async def test_each_callers_model_call_starts_before_the_next_caller_is_served() -> None:
    known: list[int] = []  # tasks the runtime had when each model call started
    rt: Any = None

    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        known.append(len(rt.mail_tasks))
        await asyncio.sleep(0.01)
        return None, _finish("done")

    rt = _runtime(agent)

    def callers() -> Any:
        return asyncio.gather(
            *(rt.submit_and_wait(user_message(f"t{i}", "go"), timeout=5) for i in range(6))
        )

    answers = await _with_loop(rt, callers)
    assert [a["message"]["body"] for a in answers] == ["done"] * 6
    # Started in each caller's step: the 1st call saw 1 task, the 2nd 2, ... (all 6 before).
    assert known == [1, 2, 3, 4, 5, 6]


async def test_the_first_step_is_the_turns_own_task_and_context() -> None:
    seen: list[asyncio.Task[Any] | None] = []

    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        seen.append(asyncio.current_task())
        MARK.set("set by the turn")
        # A timeout armed in the first step cancels the turn's task, not the caller's.
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(5)
        except TimeoutError:
            return None, _finish(f"timed out in its own task, mark {MARK.get()}")
        return None, _finish("not timed out")

    rt = _runtime(agent)

    async def caller() -> tuple[Any, asyncio.Task[Any] | None, str]:
        answer = await rt.submit_and_wait(user_message("t1", "go"), timeout=5)
        return answer, asyncio.current_task(), MARK.get()

    answer, me, mark = await _with_loop(rt, caller)
    assert answer["message"]["body"] == "timed out in its own task, mark set by the turn"
    assert len(seen) == 1 and seen[0] is not None and seen[0] is not me
    assert mark == "unset"  # the turn's context variables stay the turn's


async def test_a_task_cancelled_before_it_first_ran_is_cancelled_at_its_wait() -> None:
    steps: list[str] = []
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def work() -> str:
        steps.append("first step")
        try:
            await gate
        except asyncio.CancelledError:
            steps.append("cancelled at its wait")
            raise
        return "never"

    task = start_eagerly(work())
    assert steps == ["first step"]  # ran before start_eagerly returned
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert task.cancelled()
    assert steps == ["first step", "cancelled at its wait"]
    assert gate.cancelled()  # what it waited on is cancelled, as a task's cancel() does


async def test_a_first_step_that_ends_or_fails_ends_its_task() -> None:
    async def done_at_once() -> str:
        return "result"

    async def fails_at_once() -> str:
        raise ValueError("boom")

    finished = start_eagerly(done_at_once())
    assert await finished == "result"
    failed = start_eagerly(fails_at_once())
    try:
        await failed
    except ValueError as exc:
        assert str(exc) == "boom"
    else:
        raise AssertionError("the error of the first step was lost")
    assert asyncio.current_task() is not None  # the caller is the current task again


async def test_two_turns_started_eagerly_may_await_the_same_future() -> None:
    # Each caller's turn awaits one shared future in its first step (a client both set up,
    # a result both wait for); the second await came before any task took the first one's.
    shared: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    rt: Any = None

    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        text = await shared
        return None, _finish(text)

    rt = _runtime(agent)

    async def callers() -> Any:
        answers = asyncio.gather(
            *(rt.submit_and_wait(user_message(f"t{i}", "go"), timeout=5) for i in range(2))
        )
        await asyncio.sleep(0)
        shared.set_result("shared answer")
        return await answers

    answers = await _with_loop(rt, callers)
    assert [a["message"]["body"] for a in answers] == ["shared answer"] * 2


async def test_the_caller_may_await_what_the_first_step_awaits() -> None:
    shared: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def work() -> str:
        return await shared

    task = start_eagerly(work())
    asyncio.get_running_loop().call_soon(shared.set_result, "done")
    assert await shared == "done"
    assert await task == "done"


async def test_a_task_cancelled_after_a_first_step_that_ended_keeps_its_outcome() -> None:
    # An eager task that ended in its first step is done, as on Python 3.12: cancel() before
    # its task ran must not resume the finished coroutine (RuntimeError) nor drop its error.
    async def done_at_once() -> str:
        return "result"

    async def fails_at_once() -> str:
        raise ValueError("boom")

    finished = start_eagerly(done_at_once())
    finished.cancel()
    assert await finished == "result"
    failed = start_eagerly(fails_at_once())
    failed.cancel()
    try:
        await failed
    except ValueError as exc:
        assert str(exc) == "boom"
    else:
        raise AssertionError("the error of the first step was lost")


async def test_a_task_cancelled_before_it_first_ran_waits_for_the_task_it_awaits() -> None:
    # Cancelling a task that awaits another task cancels that one and ends once it has ended
    # (after its clean-up); with a message, the awaited task gets the message too.
    steps: list[str] = []
    release = asyncio.Event()

    async def inner() -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError as exc:
            steps.append(f"inner cancelled: {exc.args}")
            await release.wait()
            steps.append("inner cleaned up")
            raise

    async def outer(awaited: asyncio.Task[None]) -> None:
        try:
            await awaited
        except asyncio.CancelledError:
            steps.append("outer cancelled")
            raise

    awaited = asyncio.create_task(inner())
    await asyncio.sleep(0)
    task = start_eagerly(outer(awaited))
    task.cancel("stop")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not task.done()  # still waiting for the awaited task's clean-up
    release.set()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert task.cancelled()
    assert steps == ["inner cancelled: ('stop',)", "inner cleaned up", "outer cancelled"]


async def test_an_eager_tasks_repr_names_its_coroutine() -> None:
    async def named_turn() -> None:
        await asyncio.sleep(0)

    task = start_eagerly(named_turn())
    assert "named_turn" in repr(task)
    assert task.get_stack()  # the coroutine's frame, for task dumps
    await task


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Python 3.11 emulation (mail.core.eager._Started): a SystemExit/KeyboardInterrupt "
        "raised by a first step reaches the caller, and the task's own step, still scheduled, "
        "raises it again out of the event loop even when the caller handled it (3.12's "
        "eager_start raises it once: the task is done). asyncio.Task on 3.11 cannot end with "
        "that error without raising it from the loop."
    ),
)
def test_a_system_exit_in_a_first_step_reaches_the_caller_once() -> None:
    async def exits() -> None:
        raise SystemExit(3)

    async def caller() -> str:
        try:
            start_eagerly(exits())
        except SystemExit:
            pass
        await asyncio.sleep(0.01)  # the task's own step runs here
        return "handled"

    assert asyncio.run(caller()) == "handled"
