"""``GET /task/events``: (re)attach to one task's event stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from mail.core.events import TaskEvent, closing_event
from mail.core.message import utc_now_iso
from mail.core.tasks import in_spans, rolled_back_spans, shown_events
from mail.server.auth import Caller
from mail.server.errors import BadRequest
from mail.server.instances import Instance
from mail.server.sse import EventStreamResponse, event_stream_response
from mail.server.state import ServerState
from mail.utils.echo import echo

CLOSING_EVENTS = ("task_complete", "task_error")


@dataclass(slots=True)
class Subscription:
    task_id: str
    after: int
    task: Any | None = None  # a live MAILTask
    record: dict[str, Any] | None = None  # an archived task record (instance reclaimed)
    instance: Instance | None = None
    stored: bool = False  # `task` was read back from the store: finished, it never changes


# Digits of the longest event id read as a number: more is past every event of any task (and
# `int()` refuses a string of more than 4,300 digits: a 500 for a long header).
MAX_EVENT_ID_DIGITS = 18


def event_id(text: str) -> int | None:
    """The event id `text` names: ASCII digits only (``int()`` also takes ``+5``, ``1_000``
    and other scripts' digits, and refuses other characters ``isdigit`` counts, such as
    ``²``), None otherwise; an id of more than `MAX_EVENT_ID_DIGITS` digits (leading zeros
    aside) is ``10**MAX_EVENT_ID_DIGITS``, past every event."""
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= MAX_EVENT_ID_DIGITS else 10**MAX_EVENT_ID_DIGITS


def parse_after(header: str | None, query: str | None) -> int:
    """The id after which to start: ``?after=`` wins over ``Last-Event-ID``; default 0.

    Only ASCII digits count (`event_id`). A refused value is not echoed back."""
    raw, name = (query, "after") if query is not None else (header, "Last-Event-ID")
    if raw is None or raw.strip() == "":
        return 0
    text = raw.strip()
    after = event_id(text)
    if after is not None:
        return after
    raise BadRequest(f"{name} must be an event id (a non-negative integer)")


async def find_task(state: ServerState, caller: Caller, task_id: str, after: int) -> Subscription:
    """The caller's task (or, for an admin, any instance's), or 404."""
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    inst.touch()
    sub = Subscription(task_id, after)
    _look_in(state, inst, caller.role, caller.id, sub)
    await _look_in_store(state, caller.role, caller.id, sub)
    if sub.task is None and sub.record is None and caller.role == "admin" and task_id != "*":
        for other in state.instances.all():
            found = other.swarm.get_task_by_id(task_id)
            if found is not None:
                sub.task, sub.instance = found, other
                break
        if sub.task is None:
            for key in await state.finished.owners(task_id):
                await _look_in_store(state, key.caller_role, key.caller_id, sub)
                if sub.task is not None:
                    break
    return _checked(sub)


async def find_owned_task(
    state: ServerState, role: str, caller_id: str, task_id: str, after: int
) -> Subscription:
    """The task of the (role, id) instance, live, archived or stored, or 404; creates no
    instance.

    Cluster mode: an admin's view of another caller's task, asked of that caller's host.
    """
    sub = Subscription(task_id, after)
    _look_in(state, state.instances.peek(role, caller_id), role, caller_id, sub)
    await _look_in_store(state, role, caller_id, sub)
    return _checked(sub)


async def _look_in_store(state: ServerState, role: str, caller_id: str, sub: Subscription) -> None:
    """A finished task that left memory: read back from the store (it does not change)."""
    if sub.task is None and sub.record is None:
        sub.task = await state.finished.stored_task(role, caller_id, sub.task_id)
        sub.stored = sub.task is not None


def _look_in(
    state: ServerState, inst: Instance | None, role: str, caller_id: str, sub: Subscription
) -> None:
    task = None if inst is None or sub.task_id == "*" else inst.swarm.get_task_by_id(sub.task_id)
    if task is not None:
        sub.task, sub.instance = task, inst
    elif (archived := state.instances.archived_tasks(role, caller_id).get(sub.task_id)) is not None:
        sub.record = archived


def _checked(sub: Subscription) -> Subscription:
    if sub.task is None and sub.record is None:
        raise HTTPException(404, f"task '{echo(sub.task_id)}' not found")
    count = len(sub.task.events) if sub.task is not None else len(_record_events(sub.record))
    if sub.after > count:
        raise BadRequest(
            f"event id {sub.after} is past the last event of task '{sub.task_id}' "
            f"(last id: {count})"
        )
    return sub


def _record_events(record: dict[str, Any] | None) -> list[Any]:
    events = (record or {}).get("events")
    return events if isinstance(events, list) else []


def _response_body(response: Any) -> str:
    if isinstance(response, dict):
        message = response.get("message")
        if isinstance(message, dict):
            return str(message.get("body", ""))
    return ""


def _enqueued(sub: Subscription) -> int:
    """Messages waiting to go into the task once its current work ended (multitask
    ``enqueue``): the task has not ended while any wait."""
    if sub.instance is None:
        return 0
    return int(sub.instance.swarm.runtime.multitask.waiting(sub.task_id))


async def watch(sub: Subscription, *, ping_interval: float, timeout: float) -> AsyncIterator[Any]:
    """Stored events after ``sub.after``, live events until the task ends, a closing event."""
    if sub.record is not None:
        for event in shown_events(_record_events(sub.record)[sub.after :]):
            yield event
        # (An archived record keeps its answer beside it: `ArchivedTask`.)
        answer = _response_body(sub.record.get("response")) or getattr(sub.record, "answer", "")
        yield closing_event("task_complete", sub.task_id, str(answer))
        return
    task = sub.task
    assert task is not None
    # Events a rollback took back are not sent again (a subscriber that saw them was told
    # by the rollback's event, which names them).
    hidden = rolled_back_spans(task.events)
    if sub.stored:
        for event in task.events[sub.after :]:
            if not (hidden and in_spans(event.id, hidden)):
                yield event
        yield closing_event("task_complete", sub.task_id, _response_body(task.response))
        return
    index = sub.after
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    settled = False
    while True:
        while index < len(task.events):
            event = task.events[index]
            index += 1
            if not (hidden and in_spans(event.id, hidden)):
                yield event
        if task.completed and not _enqueued(sub):
            if settled:
                break
            # The waiter of a non-streamed POST /message stores its own `task_complete`
            # event right after the completion wakes it: let it run, then drain once more.
            settled = True
            await asyncio.sleep(0)
            continue
        settled = False
        remaining = deadline - loop.time()
        if remaining <= 0:
            yield closing_event("task_error", sub.task_id, f"timeout for task '{sub.task_id}'")
            return
        signal = task.event_signal()
        try:
            async with asyncio.timeout(min(ping_interval, remaining)):  # no task, unlike wait_for
                await signal.wait()
        except TimeoutError:
            if index >= len(task.events) and not task.completed:
                yield TaskEvent(
                    "ping",
                    sub.task_id,
                    "",
                    raw_payload={"timestamp": utc_now_iso(), "task_id": sub.task_id},
                )
    yield closing_event("task_complete", sub.task_id, _response_body(task.response))


async def event_stream(
    state: ServerState,
    role: str,
    caller_id: str,
    task_id: str,
    find: Callable[[], Awaitable[Subscription]],
    shape: Callable[[AsyncIterator[Any]], AsyncIterator[Any]] | None = None,
) -> EventStreamResponse:
    """The task's events as an SSE response, on one of the caller's stream slots (429 at its
    limit). `find` looks the task up, raising 400/404 before any byte is sent; `shape`, when
    given, is applied to the feed."""
    slot = state.stream_slots.acquire(role, caller_id)
    try:
        sub = await find()
        events = feed(state, sub)
    except BaseException:
        slot.release()
        raise
    settings = state.config.settings
    return event_stream_response(
        events if shape is None else shape(events),
        max_buffer_bytes=settings.sse_max_buffer_bytes,
        stall_timeout=settings.sse_slow_reader_timeout,
        task_id=task_id,
        streams=state.open_streams,
        slot=slot,
        committed=None if sub.instance is None else sub.instance.committed,
    )


def feed(state: ServerState, sub: Subscription) -> AsyncIterator[Any]:
    """The events of a found task, its instance leased while someone watches."""
    settings = state.config.settings
    events = watch(sub, ping_interval=settings.sse_ping_interval, timeout=settings.message_timeout)
    if sub.instance is None:
        return events
    inst = sub.instance

    async def leased() -> AsyncIterator[Any]:
        # Keep the instance from being reclaimed while someone watches its task.
        async with state.instances.lease(inst):
            async for event in events:
                yield event

    return leased()
