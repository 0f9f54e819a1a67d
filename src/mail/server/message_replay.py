"""What a repeated ``POST /message`` with the same ``Idempotency-Key`` gets, found from its task."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import Request
from starlette.responses import Response

from mail.core.events import closing_event
from mail.core.tasks import state_for_answer
from mail.server import task_events
from mail.server.auth import Caller
from mail.server.bodies import prefer_async, read_json_object
from mail.server.handlers import get_state
from mail.server.idempotency import REPLAYED_HEADER, Resolver, Ticket, in_progress
from mail.server.jsonio import JSONBody
from mail.server.messaging import accepted_body, name_webhook
from mail.server.sse import event_record


def _found(state: Any, caller: Caller, inst: Any, task_id: str) -> tuple[Any, dict[str, Any]]:
    """(live task or None, archived record or {}) of the caller's task `task_id`."""
    task = inst.swarm.get_task_by_id(task_id)
    if task is not None:
        return task, {}
    return None, state.instances.archived_tasks(caller.role, caller.id).get(task_id) or {}


@dataclass(slots=True)
class KeyTask:
    """The task a keyed request's first attempt started or continued, as a repeat finds it:
    the task got the message (it has events past `after`, where the key found it)."""

    state: Any
    task_id: str
    task: Any  # the live task, or None when only its archived record is left
    archived: dict[str, Any]
    events: list[Any]
    after: int

    @property
    def running(self) -> bool:
        return self.task is not None and self.task.is_running


async def key_task(request: Request, caller: Caller, ticket: Ticket) -> KeyTask | Response | None:
    """The task of the key's first request, once it got the message; otherwise what the
    repeat gets: 409 while the first request runs here, 404 when its task was removed, None
    (run it again, under the same task id) when the task never got the message."""
    task_id, context = ticket.subject, ticket.context
    if task_id is None:  # the first request has not reached its task yet
        return in_progress() if ticket.in_flight else None
    state = get_state(request)
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    # After a restart a task that ended before it is only in the store: put it back, or
    # its events look absent and the request would run a second time.
    await state.finished.bring_back(inst, task_id)
    task, archived = _found(state, caller, inst, task_id)
    if task is None and not archived and ticket.record is not None and ticket.record.finished:
        return _removed(task_id)
    events = task.events if task is not None else archived.get("events") or []
    after = int(context.get("after") or 0)
    if len(events) <= after:  # not submitted (yet, or ever)
        return in_progress(task_id=task_id) if ticket.in_flight else None
    return KeyTask(state, task_id, task, archived, events, after)


def own_answer(found: KeyTask, ticket: Ticket) -> tuple[str, dict[str, Any] | None] | Response:
    """The first request's answer, from its task: (its body, the MAIL message carrying it
    when the task still holds that message), or 409 (the task still works on it, or was
    interrupted by a restart and stopped without one)."""
    task_id, task = found.task_id, found.task
    answers = _answers(found.events[found.after :])
    if ticket.in_flight or (found.running and not answers):
        return in_progress(
            f"the task this Idempotency-Key started ({task_id}) is still running; retry "
            "to get its answer",
            task_id=task_id,
        )
    answer = task.response if task is not None else found.archived.get("response")
    message = answer.get("message") if isinstance(answer, dict) else None
    latest = None
    if isinstance(message, dict) and answer.get("id") != ticket.context.get("answer"):  # type: ignore[union-attr]
        latest = answer
    body: str | None = None
    if answers:
        # The first answer after this request's first event is its own, whatever the task
        # did since: the task's current answer may be a later message's (a streamed one
        # stores no `task_complete` event, a timed-out one a `task_error`).
        body = _answer_text(answers[0])
    elif latest is not None:
        body = str(message.get("body", ""))  # type: ignore[union-attr]
    if body is None:
        return JSONBody(
            {
                "detail": f"the task this Idempotency-Key started ({task_id}) was interrupted "
                "by a server restart and stopped without an answer; send a new message (with "
                "a new key) to continue it",
                "task_id": task_id,
            },
            status_code=409,
        )
    if latest is not None and str(message.get("body", "")) != body:  # type: ignore[union-attr]
        latest = None  # a later message's answer
    return body, latest


async def _stored(ticket: Ticket, response: Response) -> Response:
    """`response`, rebuilt from the task, stored as the key's outcome: later repeats replay it."""
    await ticket.store_outcome(response)
    response.headers[REPLAYED_HEADER] = "true"
    return response


# Shapes a task's answer as a route answered it: (request, task, body, MAIL message or None).
Shape = Callable[[Request, KeyTask, str, "dict[str, Any] | None"], Awaitable[Response]]


def task_resolver(shape: Shape) -> Resolver:
    """The resolver of a keyed route that runs one task and answers once it has its answer
    (``POST /responses``, ``POST /interswarm/message``; the route takes its key with the
    task id before the task starts): a repeat is answered from that task as a plain
    ``POST /message`` is (`resolve_message`), its answer shaped by `shape`."""

    async def resolve(request: Request, caller: Caller, ticket: Ticket) -> Response | None:
        found = await key_task(request, caller, ticket)
        if not isinstance(found, KeyTask):
            return found
        answer = own_answer(found, ticket)
        if isinstance(answer, Response):
            return answer
        return await _stored(ticket, await shape(request, found, *answer))

    return resolve


async def resolve_message(request: Request, caller: Caller, ticket: Ticket) -> Response | None:
    """The answer to a duplicate of an unfinished keyed ``POST /message`` (module docstring)."""
    found = await key_task(request, caller, ticket)
    if not isinstance(found, KeyTask):
        return found
    state, task_id, context = found.state, found.task_id, ticket.context
    events, after = found.events, found.after
    data = await read_json_object(request, required=False)
    if data.get("stream") is True:
        hook = await _own_webhook(state, caller, task_id, data, context)
        # A duplicate's readable ``Last-Event-ID`` (else from the first event).
        seen = task_events.event_id(request.headers.get("last-event-id", "").strip())
        start = min(len(events), max(after, seen or 0))
        response = await _attach(request, caller, task_id, start, _own_end(events, after))
        name_webhook(response, hook)  # the same headers as the first stream's
        return response
    preferred = prefer_async(request.headers.get("prefer"))
    if data.get("background") is True or preferred:
        # A background message's answer is that it was accepted: the same 202 again.
        hook = await _own_webhook(state, caller, task_id, data, context)
        task_state = found.task.state.value if found.task is not None else "completed"
        body = accepted_body(task_id, task_state, hook)
        headers = {"Location": body["status_url"]}
        if preferred:
            headers["Preference-Applied"] = "respond-async"
        return await _stored(ticket, JSONBody(body, status_code=202, headers=headers))
    answer = own_answer(found, ticket)
    if isinstance(answer, Response):
        return answer
    show = data.get("show_events") is True
    answer_body: dict[str, Any] = {
        "response": answer[0],
        "events": shown_events(events[after:]) if show else None,
        "task_id": task_id,
    }
    answer_body["state"] = _own_state(found, answer[1])
    hook = await _own_webhook(state, caller, task_id, data, context)
    if hook is not None:
        answer_body["webhook"] = hook
    return await _stored(ticket, JSONBody(answer_body))


def _removed(task_id: str) -> Response:
    """A finished request's task that is gone (retention, ``mail db-prune``): its events
    cannot be replayed, and the message must not run again; final, so no Retry-After."""
    return JSONBody(
        {
            "detail": f"task '{task_id}', which this Idempotency-Key started, was removed "
            "([server.store] finished_task_ttl, or `mail db-prune`): its events are gone; "
            "send the message again with a new key to run it again",
            "task_id": task_id,
        },
        status_code=404,
    )


async def _own_webhook(
    state: Any, caller: Caller, task_id: str, data: dict[str, Any], context: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The message's own webhook (``{"id", "secret"}``) as the first answer named it: it was
    stored before the task ran, so it is found after a restart too. None without one."""
    webhooks = getattr(state, "webhooks", None)
    if data.get("webhook") is None or webhooks is None:
        return None
    from mail.server.webhooks import owner_of

    hook: dict[str, Any] | None = await webhooks.request_webhook_of(
        owner_of(caller), task_id, data.get("webhook"), context.get("webhook")
    )
    return hook


_ANSWER_PREFIX = "response: '"


def shown_events(events: list[Any]) -> list[dict[str, Any]]:
    """The request's events as its first answer showed them (``show_events``): in the same
    shape (`TaskEvent.to_record`), up to its own answer (later messages' events are not its)."""
    shown: list[dict[str, Any]] = []
    for event in events:
        to_record = getattr(event, "to_record", None)
        record = to_record(parsed=True) if callable(to_record) else event_record(event)
        shown.append(record)
        if record["event"] == "task_complete" and record["id"] is not None:
            break
    return shown


def _answers(events: list[Any]) -> list[dict[str, Any]]:
    """The first two stored ``task_complete`` events after the request's first event: the
    first is this request's answer (the task cannot answer before it got the message)."""
    answers: list[dict[str, Any]] = []
    for event in events:
        record = event_record(event)
        if record["event"] == "task_complete" and record["id"] is not None:
            answers.append(record)
            if len(answers) > 1:
                break
    return answers


def _own_state(found: KeyTask, latest: Mapping[str, Any] | None) -> str:
    """The state the first request's answer left the task in (its answer's `state`): its
    `task_complete` event names any other than `completed`."""
    answers = _answers(found.events[found.after :])
    if answers:
        data = answers[0]["data"]
        extra = data.get("extra_data") if isinstance(data, dict) else None
        state = extra.get("state") if isinstance(extra, dict) else None
        return state if isinstance(state, str) else "completed"
    subject = latest["message"].get("subject") if latest is not None else None
    return state_for_answer(subject).value


def _answer_text(record: dict[str, Any]) -> str | None:
    """An answer's body as the runtime records it (``response: '<body>'``); None when it
    cannot be read."""
    data = record["data"]
    text = data.get("description") if isinstance(data, dict) else None
    if isinstance(text, str) and text.startswith(_ANSWER_PREFIX) and text.endswith("'"):
        return text[len(_ANSWER_PREFIX) : -1]
    return None


def _own_end(events: list[Any], after: int) -> tuple[int, str] | None:
    """(where the request's events end, its answer) when a later message to the task follows
    them: its stream closed there, with that answer. None when the task's events to its end
    are the request's (no later caller message, or no answer of its own among them)."""
    answer = None
    for index in range(after + 1, len(events)):
        message = getattr(events[index], "extra_data", {}).get("full_message")
        inner = message.get("message") if isinstance(message, dict) else None
        if not isinstance(inner, dict):
            continue
        if (inner.get("sender") or {}).get("address_type") in ("user", "admin"):
            return None if answer is None else (index, answer)
        if inner.get("subject") == "::task_complete::":
            answer = str(inner.get("body", ""))
    return None


async def _until(feed: Any, count: int, task_id: str, answer: str) -> AsyncIterator[Any]:
    """The first `count` events of `feed`, then the closing ``task_complete`` with `answer`."""
    try:
        sent = 0
        async for event in feed:
            if sent >= count:
                break
            sent += event.event != "ping"
            yield event
        yield closing_event("task_complete", task_id, answer)
    finally:
        await feed.aclose()


async def _attach(
    request: Request, caller: Caller, task_id: str, after: int, end: tuple[int, str] | None
) -> Response:
    """The task's events after `after`, live until it ends (or, with `end`, until that
    index, closed with that answer): a stream's duplicate."""
    state = get_state(request)
    response = await task_events.event_stream(
        state,
        caller.role,
        caller.id,
        task_id,
        lambda: task_events.find_task(state, caller, task_id, after),
        None
        if end is None
        else partial(_until, count=end[0] - after, task_id=task_id, answer=end[1]),
    )
    response.headers[REPLAYED_HEADER] = "true"
    return response
