"""A cancel racing an A2A task's own end: the executor's last word waits for the cancel's.

`test_a2a_task_lifecycle` races real cancels against real answers; whether a round lands in
the narrow window (the answer arriving while the cancel is still finding out whether it
stopped anything) is up to the scheduler. These checks put the executor in that window on
purpose: a cancel still deciding holds the executor's state back, a cancel that stopped the
task leaves the state to it, and one that stopped nothing lets the executor's answer through
(before, the answer was dropped and the task read `working` for ever).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import TaskState

from mail.a2a.executor import MAILAgentExecutor

TASK = "t-1"


class Recorder(EventQueue):
    def __init__(self) -> None:
        self.events: list[Any] = []

    async def enqueue_event(self, event: Any) -> None:
        self.events.append(event)


def _states(queue: Recorder) -> list[str]:
    statuses = [e.status for e in queue.events if type(e).__name__ == "TaskStatusUpdateEvent"]
    return [TaskState.Name(status.state) for status in statuses]


def _executor() -> MAILAgentExecutor:
    # No instance is loaded: `_finish` ends the task with the answer it was given.
    state = SimpleNamespace(instances=SimpleNamespace(peek=lambda role, id_: None))
    return MAILAgentExecutor(lambda: state)


async def _finish(executor: MAILAgentExecutor, queue: Recorder) -> None:
    updater = TaskUpdater(queue, TASK, "ctx-1")
    caller = SimpleNamespace(role="user", id="dave")
    await executor._finish(executor._state(), caller, updater, "mail-1", "the answer", False)


async def _settled(task: asyncio.Task[None]) -> bool:
    for _ in range(20):  # more turns of the loop than the finish needs when nothing holds it
        await asyncio.sleep(0)
    return task.done()


async def test_a_cancel_that_stopped_nothing_lets_the_answer_through() -> None:
    executor, queue = _executor(), Recorder()
    with executor.cancelling(TASK):
        finish = asyncio.create_task(_finish(executor, queue))
        assert not await _settled(finish), "the answer went out while the cancel was deciding"
        assert queue.events == []
    # The cancel ended undecided (it was refused: the work had finished).
    await asyncio.wait_for(finish, 5)
    assert _states(queue) == ["TASK_STATE_COMPLETED"], queue.events


async def test_a_cancel_that_stops_the_task_writes_the_state_alone() -> None:
    executor, queue = _executor(), Recorder()
    with executor.cancelling(TASK) as cancel:
        finish = asyncio.create_task(_finish(executor, queue))
        assert not await _settled(finish)
        cancel.decide(True)
        await asyncio.wait_for(finish, 5)
    assert queue.events == []


async def test_overlapping_cancels_wait_for_both_and_one_stopping_is_enough() -> None:
    executor, queue = _executor(), Recorder()
    with executor.cancelling(TASK) as first:
        with executor.cancelling(TASK):
            finish = asyncio.create_task(_finish(executor, queue))
            first.decide(True)
            assert not await _settled(finish), "went on before the second cancel decided"
        await asyncio.wait_for(finish, 5)
    assert queue.events == []
    assert not executor.is_cancelling(TASK)


async def test_without_a_cancel_the_answer_goes_out_at_once() -> None:
    executor, queue = _executor(), Recorder()
    finish = asyncio.create_task(_finish(executor, queue))
    assert await _settled(finish)
    assert _states(queue) == ["TASK_STATE_COMPLETED"]


async def test_a_refusal_waits_for_the_cancel_too() -> None:
    executor, queue = _executor(), Recorder()
    updater = TaskUpdater(queue, TASK, "ctx-1")
    with executor.cancelling(TASK):
        say = asyncio.create_task(executor._say(updater, TaskState.TASK_STATE_REJECTED, "no"))
        assert not await _settled(say)
    await asyncio.wait_for(say, 5)
    assert _states(queue) == ["TASK_STATE_REJECTED"]
