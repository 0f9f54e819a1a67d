"""Callers waiting for a task's answer: `submit_and_wait`, `submit_and_stream` (`TaskWaiters`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from mail.core.deadlines import Deadlines
from mail.core.events import TaskEvent, closing_event, ping_event
from mail.core.loop_guard import end_task
from mail.core.message import MAILMessage
from mail.core.runtime_ports import HostLink, TaskLog
from mail.core.runtime_resume import TaskSubmitError
from mail.core.system_messages import (
    system_task_end,
    task_error_body,
    task_timeout_body,
    withdrawn_body,
)
from mail.core.tasks import WITHDRAWN_SUBJECT, TaskState, state_for_answer

_RESPONSE_TEXT = "response: '{}'"


class Enqueueing(Protocol):
    """The runtime's multitask strategies (core/runtime_multitask.py)."""

    def holds(self, task_id: str, future: asyncio.Future[MAILMessage]) -> bool: ...
    def withdraw(self, task_id: str, future: asyncio.Future[MAILMessage]) -> bool: ...


class WaitHost(TaskLog, Protocol):
    """What waiting callers use of the runtime: the task log, and submitting into a task."""

    @property
    def multitask(self) -> Enqueueing: ...

    def _submit_for_task(
        self, message: MAILMessage, resume_from: str | None, kwargs: dict[str, Any]
    ) -> asyncio.Future[MAILMessage] | None: ...


class TaskWaiters(HostLink[WaitHost]):
    """The futures of the callers waiting for each task's answer."""

    def __init__(self, host: WaitHost) -> None:
        self._link(host)
        self.futures: dict[str, list[asyncio.Future[MAILMessage]]] = {}
        self.deadlines = Deadlines()  # the timeouts of `submit_and_wait`

    def add(self, task_id: str) -> asyncio.Future[MAILMessage]:
        future: asyncio.Future[MAILMessage] = asyncio.get_running_loop().create_future()
        self.futures.setdefault(task_id, []).append(future)
        return future

    def adopt(self, task_id: str, future: asyncio.Future[MAILMessage]) -> None:
        """A caller's future made elsewhere (an enqueued message's, once it goes in) waits
        for the task's next answer from now on."""
        self.futures.setdefault(task_id, []).append(future)

    def _submit(
        self,
        rt: WaitHost,
        message: MAILMessage,
        resume_from: str | None,
        kwargs: dict[str, Any],
        future: asyncio.Future[MAILMessage],
    ) -> asyncio.Future[MAILMessage]:
        """Submit; the future the caller waits on: its own, or an enqueued message's (the
        answer of the run its message starts, not of the run under way). While a running
        task takes the message, the caller's own future is not among the task's waiters:
        those of the message it interrupts or rolls back get their answer then."""
        task_id = message["message"]["task_id"]
        task = rt.mail_tasks.get(task_id)
        if task is None or not task.is_running:
            later = rt._submit_for_task(message, resume_from, kwargs)
        else:
            self.drop(task_id, future)
            later = rt._submit_for_task(message, resume_from, kwargs)
            if later is None:
                self.adopt(task_id, future)
        if later is None:
            return future
        self.drop(task_id, future)
        return later

    def drop(self, task_id: str, future: asyncio.Future[MAILMessage]) -> None:
        futures = self.futures.get(task_id)
        if futures and future in futures:
            futures.remove(future)
            if not futures:
                del self.futures[task_id]

    def open(self) -> list[asyncio.Future[MAILMessage]]:
        """Every caller still waiting, whatever its task."""
        return [f for futures in self.futures.values() for f in futures if not f.done()]

    def resolve(self, task_id: str, response: MAILMessage) -> None:
        """The task completed: every caller waiting for it gets `response`."""
        for future in self.futures.pop(task_id, []):
            if not future.done():
                future.set_result(response)

    def release_all(self, response: MAILMessage) -> None:
        """Shutdown: every caller still waiting gets `response`."""
        for futures in self.futures.values():
            for future in futures:
                if not future.done():
                    future.set_result(response)

    async def submit_and_wait(
        self, message: MAILMessage, timeout: float, resume_from: str | None, kwargs: dict[str, Any]
    ) -> MAILMessage:
        """Submit and wait for the task's final response (or a system error response)."""
        rt = self.host
        task_id = message["message"]["task_id"]
        future = self.add(task_id)
        try:
            future = self._submit(rt, message, resume_from, kwargs, future)
            # The caller's own future times out (no asyncio.timeout context around a future
            # only this call awaits), on the deadlines' shared timer: no loop timer per call.
            # None waits without a limit, as asyncio.timeout(None) did.
            if timeout is not None:
                entry = self.deadlines.add(timeout, future)
                try:
                    response = await future
                finally:
                    self.deadlines.answered(future, entry)
            else:
                response = await future
            body = response["message"]["body"]
            # An answer that did not complete the task (a failure, a pause) says so, for a
            # repeat of a keyed request answered from the task's events (message_replay).
            state = state_for_answer(response["message"].get("subject"))
            extra = None if state is TaskState.COMPLETED else {"state": state.value}
            rt._emit(
                task_id, "task_complete", functools.partial(_RESPONSE_TEXT.format, body), extra
            )
            return response
        except TaskSubmitError as exc:
            if exc.status != 409:
                # A refused conflicting submission is not an event of the (running) task.
                rt._emit(task_id, "task_error", f"error for task: {exc}")
            return system_task_end(rt.swarm_name, task_id, "::task_error::", task_error_body(exc))
        except TimeoutError:
            if rt.multitask.withdraw(task_id, future):
                # It never went in: the task's own work goes on.
                return system_task_end(rt.swarm_name, task_id, WITHDRAWN_SUBJECT, withdrawn_body())
            response = system_task_end(
                rt.swarm_name, task_id, "::task_timeout::", task_timeout_body()
            )
            rt._emit(task_id, "task_error", f"timeout for task '{task_id}'")
            end_task(rt, task_id, response)  # the caller has its answer: stop the task
            return response
        finally:
            self.drop(task_id, future)

    async def submit_and_stream(
        self,
        message: MAILMessage,
        timeout: float,
        resume_from: str | None,
        ping_interval: float,
        kwargs: dict[str, Any],
        on_submitted: Callable[[], Awaitable[Any]] | None = None,
        *,
        rt: WaitHost | None = None,
        detached: bool = False,
    ) -> AsyncIterator[TaskEvent]:
        """Submit, then yield the task's new events as they happen and a final event.

        The final event is `task_complete` with the response body, or `task_error`.
        Heartbeat `ping` events are yielded after `ping_interval` seconds of silence.
        `on_submitted` is awaited once the submission is in, before any event is yielded
        (the caller makes it durable there); not when the submission is refused.
        The runtime passes itself as `rt`: a stream not yet iterated then holds it (a stream
        a caller kept of a swarm it let go of still runs; see runtime_ports.HostLink).
        `detached`: nobody waits for the answer (a background message): an enqueued message
        is not withdrawn while it waits for its turn, its `timeout` counts from when it goes
        in (its caller was told it was accepted).
        """
        rt = rt if rt is not None else self.host
        task_id = message["message"]["task_id"]
        existing = rt.mail_tasks.get(task_id)
        index = len(existing.events) if existing else 0
        future = self.add(task_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            try:
                future = self._submit(rt, message, resume_from, kwargs, future)
            except TaskSubmitError as exc:
                yield closing_event("task_error", task_id, str(exc))
                return
            task = rt.mail_tasks[task_id]
            # Where the events of this message's run end: the task's events when its answer
            # came (a message enqueued behind it may go in right after).
            end: list[int] = []
            future.add_done_callback(lambda _f: end.append(len(task.events)))
            if on_submitted is not None:
                await on_submitted()
            while True:
                while index < len(task.events) and not (end and index >= end[0]):
                    yield task.events[index]
                    index += 1
                if future.done():
                    break
                if detached and rt.multitask.holds(task_id, future):
                    deadline = loop.time() + timeout  # (checked again at each wake-up)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if rt.multitask.withdraw(task_id, future):
                        yield closing_event("task_error", task_id, withdrawn_body())
                        return
                    for event in task.events[index:]:
                        yield event
                    # Recorded on the task; the stream gets one task_error frame, the final one.
                    rt._emit(task_id, "task_error", f"timeout for task '{task_id}'")
                    # The caller has its answer: the task stops (is_running false, peers told).
                    end_task(
                        rt,
                        task_id,
                        system_task_end(
                            rt.swarm_name, task_id, "::task_timeout::", task_timeout_body()
                        ),
                    )
                    yield closing_event("task_error", task_id, task_timeout_body())
                    return
                signal = task.event_signal()
                try:
                    # asyncio.timeout, not wait_for: no extra task per wait (3.11)
                    async with asyncio.timeout(min(ping_interval, remaining)):
                        await signal.wait()
                except TimeoutError:
                    if index >= len(task.events) and not future.done():
                        yield ping_event(task_id)
            stop = end[0] if end else len(task.events)
            while index < stop:
                yield task.events[index]
                index += 1
            response = future.result()
            state = state_for_answer(response["message"].get("subject"))
            shown = None if state is TaskState.COMPLETED else state.value
            yield closing_event("task_complete", task_id, response["message"]["body"], shown)
        finally:
            self.drop(task_id, future)
