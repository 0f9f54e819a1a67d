"""``POST /message`` from the request to its answer, in one direction."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mail.core.tasks import state_for_answer
from mail.server.admission import Admission, admit
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.bodies import MessageRequest, parse_message
from mail.server.idempotency import Ticket, current_ticket
from mail.server.instances import Instance
from mail.server.jsonio import JSONBody
from mail.server.sse import EventStreamResponse, event_stream_response
from mail.server.state import ServerState

logger = logging.getLogger("mail.server")


def answered(state: ServerState, inst: Instance, task_id: str | None) -> None:
    """The caller has the task's answer: a finished task may leave memory now."""
    if state.finished is not None:
        state.finished.answered(inst, task_id)


async def handle(request: Request) -> Response:
    """``POST /message`` (routed under the Idempotency-Key guard, `routes_user`, which has
    resolved and role-checked a keyed request's caller already)."""
    ticket = current_ticket(request)
    keyed = None if ticket is None else ticket.caller
    caller = keyed if keyed is not None else await caller_admin_or_user(request)
    req = await parse_message(request)
    state: ServerState = request.app.state.mail
    if req.stream:
        return await stream_message(state, caller, req, ticket)
    if req.background or req.preferred:
        body = await background_message(state, caller, req, ticket)
        headers = {"Location": body["status_url"]}
        if req.preferred:
            headers["Preference-Applied"] = "respond-async"
        return JSONBody(body, status_code=202, headers=headers)
    return JSONBody(await post_message(state, caller, req, ticket))


def submit_kwargs(req: MessageRequest) -> dict[str, Any]:
    """What the swarm's submission takes besides the body."""
    return dict(
        subject=req.subject,
        msg_type=req.msg_type,
        entrypoint=req.entrypoint,
        task_id=req.task_id,
        resume_from=req.resume_from,
        **req.kwargs,
    )


def _timeout(state: ServerState, req: MessageRequest) -> float:
    return req.timeout if req.timeout is not None else state.config.settings.message_timeout


async def _leased_events(
    state: ServerState, admitted: Admission, stored: asyncio.Event, *, detached: bool = False
) -> AsyncIterator[Any]:
    """The task's events, `stored` set once the submission is committed. The caller's
    instance is leased (never reclaimed) meanwhile; the admission is released once the
    message is in the runtime (its first event: the task's state answers from there)."""
    req, inst, ticket = admitted.req, admitted.inst, admitted.ticket
    assert req is not None
    events = inst.swarm.stream_events(
        req.body,
        timeout=_timeout(state, req),
        ping_interval=state.config.settings.sse_ping_interval,
        on_stored=stored.set,
        detached=detached,
        **submit_kwargs(req),
    )
    try:
        async with state.instances.lease(inst):
            async for event in events:
                admitted.release()
                yield event
    finally:
        admitted.release()
    answered(state, inst, req.task_id)  # the whole answer went out
    if ticket is not None and not detached:
        # A repeat of a stream attaches to the task's events, which hold all of it: no
        # outcome row (`STREAMED_OUTCOME`) once the task ended.
        ticket.task_ended(inst, req)


async def run_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> tuple[dict[str, Any], list[Any]]:
    """Submit and wait for the task's final MAILMessage; returns ``(message, events)``."""
    admitted = await admit(state, caller, req, ticket)
    inst = admitted.inst
    try:
        async with state.instances.lease(inst):
            response, events = await inst.swarm.post_message_task_events(
                req.body,
                show_events=req.show_events,
                timeout=_timeout(state, req),
                **submit_kwargs(req),
            )
        if ticket is not None:
            ticket.task_answered(inst, req, response)
    finally:
        admitted.release()
    _log_outcome(inst, req.task_id, response)
    answered(state, inst, req.task_id)
    return response, events


_NORMAL_ENDINGS = frozenset({"::task_complete::", "::breakpoint_tool_call::", "::action_review::"})


def _log_outcome(inst: Instance, task_id: str | None, response: Any) -> None:
    # Only unusual endings are logged at INFO; a normal completion costs a level check.
    message = response.get("message", {}) if isinstance(response, dict) else {}
    subject = message.get("subject", "")
    if subject in _NORMAL_ENDINGS:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("task %s of %s ended with %s", task_id, inst.owner, subject)
    else:
        logger.info("task %s of %s ended with %s", task_id, inst.owner, subject or "no subject")


async def post_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> dict[str, Any]:
    """``POST /message`` without streaming: ``{"response", "events", "task_id", "state"}``."""
    response, events = await run_message(state, caller, req, ticket)
    message = response.get("message", {}) if isinstance(response, dict) else {}
    answer = {
        "response": message.get("body", ""),
        "events": [e.to_record(parsed=True) for e in events] if req.show_events else None,
        "task_id": message.get("task_id") or req.task_id,
        # How the task ended (or why it paused), as GET /task says: "failed" on an error.
        "state": state_for_answer(message.get("subject")).value,
    }
    if req.webhook is not None:
        answer["webhook"] = req.webhook  # {"id", "secret"} of the message's own webhook
    return answer


async def start_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> asyncio.Task[None]:
    """``POST /message``'s work for a caller that does not wait for the answer (a background
    message; the MCP ``post_message(wait=false)``): what refuses the message (a quota, an
    unknown or running task, a bad entrypoint) raises here, and the submission (and the
    request's Idempotency-Key) is committed before this returns (acknowledged means stored: a
    task said to have started exists after a kill -9). The task runs on in the returned
    asyncio task, which the caller must hold."""
    admitted = await admit(state, caller, req, ticket)
    stored = asyncio.Event()
    # An enqueued message waits for its turn, whatever its timeout (`detached`).
    events = _leased_events(state, admitted, stored, detached=True)

    async def run() -> None:
        async for _event in events:
            pass

    runner = asyncio.create_task(run(), name=f"mail-message-{req.task_id}")
    committed = asyncio.create_task(stored.wait())
    try:
        await asyncio.wait({runner, committed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        committed.cancel()
    if not stored.is_set():
        runner.result()  # what refused the submission (it ended before the commit)
    return runner


async def background_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> dict[str, Any]:
    """``POST /message`` in the background (``"background": true`` or ``Prefer:
    respond-async``): every check of a plain message, then the answer as soon as the task
    and the message are stored, while the task runs on (held by the server until it ends).
    The caller follows it with ``GET /task``, ``GET /task/events`` or a webhook."""
    runner = await start_message(state, caller, req, ticket)
    state.background.add(runner)
    runner.add_done_callback(_background_ended)
    assert req.task_id is not None
    inst = state.instances.peek(caller.role, caller.id)
    task = inst.swarm.get_task_by_id(req.task_id) if inst is not None else None
    return accepted_body(
        req.task_id, task.state.value if task is not None else "running", req.webhook
    )


def _background_ended(runner: asyncio.Task[None]) -> None:
    if not runner.cancelled() and runner.exception() is not None:
        logger.error("background message failed: %s", runner.exception())


def accepted_body(task_id: str, state: str, hook: dict[str, Any] | None) -> dict[str, Any]:
    """The answer to a background message (and to a repeat of it by its Idempotency-Key)."""
    body: dict[str, Any] = {
        "task_id": task_id,
        "state": state,
        "status_url": f"/task/{task_id}",
        "events_url": f"/task/events?task_id={task_id}",
    }
    if hook is not None:
        body["webhook"] = hook  # {"id", "secret"} of the message's own webhook
    return body


async def stream_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> EventStreamResponse:
    """Submit and stream the task's events as SSE, ending with ``task_complete``.

    The caller's stream slot is taken first (`admit`): at the limit the answer is 429 and
    no task starts. The response holds the slot until it ends.
    """
    admitted = await admit(state, caller, req, ticket)
    slot, admitted.slot = admitted.slot, None  # the response's from here
    try:
        # Set once the store committed the submission (Swarm.submit_events): the response's
        # headers wait for it, as a plain answer waits for its commit.
        stored = asyncio.Event()
        response = event_stream_response(
            _leased_events(state, admitted, stored),
            max_buffer_bytes=state.config.settings.sse_max_buffer_bytes,
            stall_timeout=state.config.settings.sse_slow_reader_timeout,
            task_id=req.task_id,
            streams=state.open_streams,
            slot=slot,
            # Nothing, headers included, leaves before the submission is committed.
            opened=stored,
        )
        name_webhook(response, req.webhook)
        return response
    except BaseException:
        if slot is not None:
            slot.release()
        raise


def name_webhook(response: Any, hook: dict[str, Any] | None) -> None:
    """A stream names the message's own webhook (``{"id", "secret"}``) in its headers: the
    first answer and every replay of it by its Idempotency-Key alike."""
    if hook is not None:
        response.headers["MAIL-Webhook-Id"] = hook["id"]
        if hook["secret"]:
            response.headers["MAIL-Webhook-Secret"] = hook["secret"]
