"""Shapes the v1.3 Python API promised, built from ours at the edge."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Generator, Iterable
from typing import TYPE_CHECKING, Any

from mail.core.events import TaskEvent, compact_json
from mail.core.message import (
    MAILMessage,
    create_agent_address,
    create_user_address,
    make_message,
    make_request,
)
from mail.core.system_messages import system_task_end, task_timeout_body

if TYPE_CHECKING:
    from sse_starlette import ServerSentEvent

# The closing events of a stream: they carry the answer and are never stored.
CLOSING_EVENTS = frozenset({"task_complete", "task_error"})


class Done(Coroutine[Any, Any, None]):
    """A coroutine that has already finished, with ``None`` as its result.

    ``MAILRuntime.submit`` queues its message at once and returns this, so both
    ``runtime.submit(msg)`` and ``await runtime.submit(msg)`` work, without a coroutine
    object per message (and no "never awaited" warning when it is not awaited). It is a
    ``collections.abc.Coroutine``, as v1.3's ``async def`` gave one: the doors of asyncio
    that take only coroutines (``asyncio.create_task``, ``TaskGroup.create_task``,
    ``run_coroutine_threadsafe``, ``asyncio.run``) take it too.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that finishes at once

    def send(self, value: Any) -> Any:
        raise StopIteration  # finished at once: a task running it is done at its first step

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """As a finished coroutine does: the exception comes straight back out."""
        error = typ if val is None else val
        if isinstance(error, type):
            error = error()
        raise error.with_traceback(tb)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return "<mail.core.compat.Done>"


DONE = Done()


class AwaitableBool:
    """A truth value that may also be awaited (for v1.3 methods that were coroutines).

    ``if router.is_running():`` and ``await router.is_running()`` both work: the object is
    truthy or falsy as the value, and awaiting it gives the value as a real ``bool``.
    """

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = bool(value)

    def __bool__(self) -> bool:
        return self.value

    def __eq__(self, other: object) -> bool:
        return self.value == (other.value if isinstance(other, AwaitableBool) else other)

    def __hash__(self) -> int:
        return hash(self.value)

    def __await__(self) -> Generator[Any, None, bool]:
        return self.value
        yield  # a generator that finishes at once

    def __repr__(self) -> str:
        return repr(self.value)


class RecentQueue(asyncio.Queue[Any]):
    """An asyncio queue holding at most `maxsize` items; a put on a full queue drops the
    oldest item instead of waiting (for state nobody is obliged to drain)."""

    def put_latest(self, item: Any) -> None:
        if self.full():
            self.get_nowait()
        self.put_nowait(item)


class JSONDict(dict[str, Any]):
    """A dict whose text form is its compact JSON (what an SSE frame's ``data:`` line holds)."""

    def __str__(self) -> str:
        return compact_json(dict(self))


def server_sent_events(events: Iterable[TaskEvent]) -> list[ServerSentEvent]:
    """``events`` as ServerSentEvent objects whose ``data`` is the event's payload dict."""
    from sse_starlette import ServerSentEvent

    return [ServerSentEvent(data=e.payload, event=e.event, id=e.id) for e in events]


def server_sent_event(event: TaskEvent) -> ServerSentEvent:
    """One streamed event as v1.3 streamed it: ``data`` is the JSON text of a stored event,
    and a dict (whose text is its JSON) for the closing ``task_complete`` / ``task_error``."""
    from sse_starlette import ServerSentEvent

    if event.id is None and event.event in CLOSING_EVENTS:
        return ServerSentEvent(data=JSONDict(event.payload), event=event.event)
    return ServerSentEvent(data=event.data, event=event.event, id=event.id)


async def server_sent_event_stream(
    events: AsyncIterator[TaskEvent],
) -> AsyncIterator[ServerSentEvent]:
    """A stream of TaskEvents as ServerSentEvent objects (see `server_sent_event`)."""
    async for event in events:
        yield server_sent_event(event)


async def run_submitted_task(
    rt: Any,
    task_id: str | None,
    action_override: Any,
    resume_from: str | None,
    max_steps: int | None,
    timeout: float,
    kwargs: dict[str, Any],
) -> MAILMessage:
    """v1.3's ``run_task(task_id=...)``: serve the mailbox until a task whose message was
    queued before (``await runtime.submit(message)``) answers, and return the answer.

    `rt` is the MAILRuntime (its own ``run_task`` calls this when given no message).
    """
    if not task_id:
        return system_task_end(
            rt.swarm_name,
            "null",
            "::runtime_error::",
            "The parameter 'task_id' is required to run a task: submit its message first, "
            "then call run_task(task_id=...).",
        )
    if resume_from in ("breakpoint_tool_call", "action_review"):
        # These resumes take their input from kwargs; the message only names the task.
        stand_in = make_message(
            make_request(
                task_id,
                create_user_address(rt.user_id),
                create_agent_address(rt.entrypoint),
                "",
                "",
            ),
            "request",
        )
        answer: MAILMessage = await rt.run_task(
            stand_in, action_override, resume_from, max_steps, timeout, **kwargs
        )
        return answer
    task = rt.get_task_by_id(task_id)
    if task is None:
        return system_task_end(
            rt.swarm_name, task_id, "::runtime_error::", f"The task '{task_id}' was not found."
        )
    if task.completed:
        if resume_from != "user_response" and task_id in rt.response_messages:
            return rt.response_messages[task_id]  # type: ignore[no-any-return]
        rt._resume_task(task_id)
    future = rt.waiters.add(task_id)
    limit = max_steps if max_steps is not None else rt.default_max_steps
    try:
        async with rt.ephemeral_loop(limit, action_override):
            async with asyncio.timeout(timeout):
                return await future  # type: ignore[no-any-return]
    except TimeoutError:
        return system_task_end(rt.swarm_name, task_id, "::task_timeout::", task_timeout_body())
    finally:
        rt.waiters.drop(task_id, future)
