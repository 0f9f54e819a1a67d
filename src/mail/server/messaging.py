"""What ``POST /message``, ``GET /tasks`` and ``GET /task`` mean, independent of HTTP parsing.

Routes parse and authorize, then call one function here. Each function works on the caller's
own instance only, which is what isolates users from each other.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException

from mail.core.message import new_task_id
from mail.core.runtime_resume import TaskSubmitError, message_too_large
from mail.core.stored_bytes import text_bytes
from mail.core.tasks import state_for_answer
from mail.server.auth import Caller
from mail.server.bodies import MessageRequest, check_subject
from mail.server.errors import BadRequest
from mail.server.idempotency import Ticket
from mail.server.instances import Instance
from mail.server.paused_quota import CLAIM_SECONDS, check_paused_quota
from mail.server.sse import EventStreamResponse, event_stream_response
from mail.server.state import ServerState
from mail.server.storage_health import check_room_for_new_task
from mail.server.team import parse_attachments, store_uploads
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")


def _check_entrypoint(state: ServerState, req: MessageRequest) -> None:
    if req.entrypoint is None:
        return
    names = state.entrypoint_names()
    if not names or req.entrypoint in names:
        return
    close = difflib.get_close_matches(req.entrypoint, names, n=1, cutoff=0.6)
    hint = f" Did you mean '{close[0]}'?" if close else f" Entrypoints: {', '.join(names)}."
    raise BadRequest(
        f"parameter 'entrypoint': '{echo(req.entrypoint)}' is not an entrypoint agent of swarm '{state.swarm_name}'.{hint}"
    )


def _task_or_none(inst: Instance, task_id: str) -> Any | None:
    return inst.swarm.get_task_by_id(task_id)


def _prepare(
    state: ServerState, inst: Instance, req: MessageRequest, *, fresh: bool = False
) -> None:
    """Checks that need the caller's instance; fills in a task id when none was given.
    `fresh`: the task id is one the server just made up for a new task (a keyed request's:
    no task has it), checked as a new task, without looking it up.

    Synchronous on purpose: the checks and the claim on the task id happen without a
    suspension in between, so of two concurrent requests for one task exactly one wins.
    """
    _check_entrypoint(state, req)
    check_subject(req.subject, state.config.settings.max_subject_chars)
    strategy = req.multitask_strategy or state.config.settings.multitask_strategy
    if strategy != "reject":  # (the runtime's own default): what it does to a running task
        req.kwargs["multitask_strategy"] = strategy
    limit = inst.swarm.runtime.max_message_body
    if limit and len(req.body) > limit:
        raise HTTPException(413, f"parameter 'body': {message_too_large(len(req.body), limit)}")
    if req.task_id is None or fresh:
        if req.resume_from is not None:
            raise BadRequest("parameter 'task_id' is required when resume_from is set")
        check_room_for_new_task(state)
        check_paused_quota(state, inst)
        if req.task_id is None:
            req.task_id = new_task_id()
        # A new task too: a malformed budget (kwargs.max_cost "lots") is a 400 here, not a
        # 200 whose answer is the error.
        _check_submission(inst, req.task_id, req)
        _claim(inst, req.task_id)
        return
    task_id = req.task_id
    task = _task_or_none(inst, task_id)
    known = task is not None
    if task is None or not (task.is_running or _is_paused(inst, task_id)):
        check_room_for_new_task(state)  # new work: a new task, or a finished one again
    continuing = req.resume_from is None or (req.resume_from == "user_response" and known)
    if continuing and not _is_paused(inst, task_id):
        # A new task under an id the caller chose, or a message continuing a task that is
        # not paused (a finished one can pause again): either may add a paused task. A
        # message to a paused task closes that pause, so it is never refused.
        check_paused_quota(state, inst, task_id)
    if _task_or_none(inst, task_id) is None and task_id in state.instances.archived_tasks(
        inst.kind, inst.id
    ):
        # Never replace a record, whatever resume_from says.
        raise HTTPException(
            409,
            f"task '{task_id}' belongs to an instance that was reclaimed while idle "
            "and cannot be continued or resumed without persistence (the server keeps no store: "
            '[server.store] kind = "memory")',
        )
    taken_over = strategy != "reject" and task is not None and task.is_running
    if taken_over:
        _check_enqueue_room(state, inst, task_id, strategy)
    claimed = inst.claimed_tasks.get(task_id)
    if claimed is not None and time.monotonic() - claimed < CLAIM_SECONDS and not taken_over:
        hint = (
            ", or send the message with a multitask_strategy (enqueue, interrupt, rollback)"
            if task is not None and task.is_running
            else ""
        )
        raise HTTPException(
            409,
            f"task '{task_id}' is still running (another request is working on it); wait for "
            f"its answer{hint}",
        )
    _check_submission(inst, task_id, req)
    _claim(inst, task_id)
    if taken_over and strategy == "enqueue":
        inst.swarm.runtime.multitask.reserve(task_id)  # its place, until it is enqueued
        req.holds_place = True


def _give_back_place(inst: Instance, req: MessageRequest) -> None:
    """A request refused after `_prepare` frees the place it held behind a running task."""
    if req.holds_place and req.task_id is not None:
        req.holds_place = False
        inst.swarm.runtime.multitask.give_back(req.task_id)


def _check_enqueue_room(state: ServerState, inst: Instance, task_id: str, strategy: str) -> None:
    """429 when `max_enqueued_messages_per_task` messages already wait behind the task (or
    were let through to wait: requests checked and not submitted yet)."""
    limit = state.config.settings.max_enqueued_messages_per_task
    multitask = inst.swarm.runtime.multitask
    if strategy == "enqueue" and limit and multitask.places_taken(task_id) >= limit:
        raise HTTPException(
            429,
            f"{limit} messages already wait for task '{task_id}' to finish its current work "
            "([server.settings] max_enqueued_messages_per_task); send this one later",
            headers={"Retry-After": "5"},
        )


async def prepare(
    state: ServerState,
    inst: Instance,
    req: MessageRequest,
    *,
    brought_back: bool = False,
    fresh: bool = False,
) -> None:
    """`_prepare`, after what needs the store: a finished task the message names is put back
    into the instance, and the caller's stored bytes and tasks are checked (429 past
    [server.store] max_stored_bytes_per_caller / max_stored_tasks_per_caller).

    `brought_back`: the caller already did that (or the task id is one it just made up, which
    the store cannot know): no store read here. `fresh`: it made the id up (`_prepare`)."""
    finished = state.finished
    if finished is not None:
        if not brought_back:
            await finished.bring_back(inst, req.task_id)
        await finished.books(inst.kind, inst.id)
        task = None if req.task_id is None or fresh else _task_or_none(inst, req.task_id)
        uploaded = max(0, req.upload_bytes() - req.replaced_bytes)  # (new bytes only)
        # A resume of a paused task too: the results it brings (`kwargs`) are kept twice,
        # in the agent's history and in the event that shows them. Checked with no
        # suspension before `_prepare`'s claim.
        resumed = 2 * text_bytes(req.kwargs) if req.kwargs else 0
        state.quota.check(
            inst.key,
            new_task=task is None,
            incoming=len(req.body) + uploaded + resumed,
            open_ids=inst.swarm.runtime.open_tasks.ids,
        )
        _prepare(state, inst, req, fresh=fresh)
        if uploaded and finished.team_store is not None:
            # In the books from here, with no suspension since the check: concurrent
            # requests see each other's uploads (`_store_uploads` settles the figure).
            state.quota.reserve(inst.key, uploaded)
            req.reserved_bytes = uploaded
        return
    _prepare(state, inst, req, fresh=fresh)


async def check_incoming_task(
    state: ServerState, inst: Instance, task_id: str, incoming: int
) -> None:
    """`prepare`'s checks for a message that enters the caller's instance another way (a
    user's ``POST /interswarm/message``, a peer's ``/interswarm/forward``): a finished task
    it names is put back first; for a new task or a message to a finished one, 503 while
    the task store is backed up, 429 past `max_paused_tasks_per_caller` (a peer's tasks
    are its caller's, as a local caller's are) and 429 naming the setting when the message
    would pass a storage bound. A message to a running or paused task is never refused:
    its work goes on. The task id is claimed (counted by the paused-task bound) until
    `_release`: the caller releases it once the message is in the instance."""
    finished = state.finished
    if finished is not None:
        await finished.bring_back(inst, task_id)
        await finished.books(inst.kind, inst.id)
    task = _task_or_none(inst, task_id)
    if task is not None and (task.is_running or _is_paused(inst, task_id)):
        return
    check_room_for_new_task(state)
    check_paused_quota(state, inst, task_id)
    if finished is not None:
        state.quota.check(
            inst.key,
            new_task=task is None,
            incoming=incoming,
            open_ids=inst.swarm.runtime.open_tasks.ids,
        )
    _claim(inst, task_id)  # no suspension since the checks: concurrent ones see it


def release_task_claim(inst: Instance, task_id: str) -> None:
    """The message of `check_incoming_task` is in the instance (or never will be)."""
    _release(inst, task_id)


def _unreserve(state: ServerState, inst: Instance, req: MessageRequest) -> None:
    """The request's reserved upload bytes leave the books (stored, or never to be)."""
    if req.reserved_bytes:
        state.quota.unreserve(inst.key, req.reserved_bytes)
        req.reserved_bytes = 0


def answered(state: ServerState, inst: Instance, task_id: str | None) -> None:
    """The caller has the task's answer: a finished task may leave memory now."""
    if state.finished is not None:
        state.finished.answered(inst, task_id)


def _check_submission(inst: Instance, task_id: str, req: MessageRequest) -> None:
    try:
        # Includes the review checks: 409 while calls wait for review, 400 for bad decisions
        # or budgets, 404 for a resume of an unknown task.
        inst.swarm.runtime.check_submission(task_id, req.resume_from, req.kwargs)
    except TaskSubmitError as exc:
        raise HTTPException(exc.status, str(exc)) from None


def _is_paused(inst: Instance, task_id: str) -> bool:
    task = _task_or_none(inst, task_id)
    return (
        task is not None
        and not task.is_running
        and bool(task.pending_reviews or inst.swarm.runtime.pending_breakpoints(task_id))
    )


def _claim(inst: Instance, task_id: str) -> None:
    inst.claimed_tasks[task_id] = time.monotonic()


def _release(inst: Instance, task_id: str | None) -> None:
    if task_id is not None:
        inst.claimed_tasks.pop(task_id, None)


async def _uploads(state: ServerState, caller: Caller, req: MessageRequest) -> Any:
    """Validated uploads of the request (400/413 before any instance work)."""
    if req.attachments is None:
        return []
    cfg = state.config.team_tools
    return parse_attachments(
        req.attachments,
        cfg.max_attachment_bytes,
        max_filename_chars=cfg.max_filename_chars,
        max_description_chars=cfg.max_description_chars,
    )


async def _store_uploads(
    state: ServerState,
    inst: Instance,
    caller: Caller,
    req: MessageRequest,
    uploads: Any,
    ticket: Ticket | None,
) -> None:
    if uploads:
        assert req.task_id is not None
        try:
            ids = ticket.context.get("uploads") if ticket is not None and ticket.taken else None
            replacing = bool(ticket is not None and ticket.takeover)
            stored = await store_uploads(inst.swarm, caller, req.task_id, uploads, ids, replacing)
        except BaseException:
            _unreserve(state, inst, req)
            _give_back_place(inst, req)
            _release(inst, req.task_id)  # refused (quota, no file tools): the id is free again
            if ticket is not None:
                await ticket.release()  # and so is the key: nothing ran
            raise
        req.kwargs["attachments"] = stored
        _unreserve(state, inst, req)
        if state.finished is not None and state.finished.team_store is not None:
            # In the caller's books now, not at the next measurement of its team data.
            added = sum(len(data) for _, _, data in uploads) - req.replaced_bytes
            state.quota.add_team(inst.key, max(0, added))


async def _request_webhook(
    state: ServerState, inst: Instance, caller: Caller, req: MessageRequest, ticket: Ticket | None
) -> dict[str, Any] | None:
    """The message's own webhook (a subscription for its task), stored before the task runs."""
    if req.webhook is None:
        return None
    assert req.task_id is not None
    from mail.server.webhooks import request_webhook

    hook_id = ticket.context.get("webhook") if ticket is not None and ticket.taken else None
    try:
        return await request_webhook(state, caller, req.task_id, req.webhook, hook_id)
    except BaseException:
        _unreserve(state, inst, req)  # its uploads will not be stored
        _give_back_place(inst, req)
        _release(inst, req.task_id)  # refused: the task id is free again
        if ticket is not None:
            await ticket.release()  # and so is the key: nothing ran
        raise


def _post_kwargs(state: ServerState, req: MessageRequest) -> dict[str, Any]:
    return dict(
        subject=req.subject,
        msg_type=req.msg_type,
        entrypoint=req.entrypoint,
        task_id=req.task_id,
        resume_from=req.resume_from,
        **req.kwargs,
    )


async def _prepare_keyed(
    state: ServerState, inst: Instance, req: MessageRequest, ticket: Ticket | None
) -> None:
    """`prepare`, and for a request with an Idempotency-Key, the key committed first, with
    the task it starts or continues (`Ticket.take_message`).

    Taken before the checks: a repeat of the request is answered from the key (its outcome,
    or "still running") rather than by the checks (a continuation's repeat would be "task
    still running"). A request the checks refuse gives its key back.
    """
    if ticket is None:
        await prepare(state, inst, req)
        return
    brought_back, fresh = await ticket.take_message(state, inst, req)
    try:
        await prepare(state, inst, req, brought_back=brought_back, fresh=fresh)
    except BaseException:
        await ticket.release()
        raise


async def run_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> tuple[dict[str, Any], list[Any]]:
    """Submit and wait for the task's final MAILMessage; returns ``(message, events)``."""
    uploads = await _uploads(state, caller, req)
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    await _prepare_keyed(state, inst, req, ticket)
    req.webhook = await _request_webhook(state, inst, caller, req, ticket)
    await _store_uploads(state, inst, caller, req, uploads, ticket)
    timeout = req.timeout if req.timeout is not None else state.config.settings.message_timeout
    try:
        async with state.instances.lease(inst):
            response, events = await inst.swarm.post_message_task_events(
                req.body, show_events=req.show_events, timeout=timeout, **_post_kwargs(state, req)
            )
        if ticket is not None:
            ticket.task_answered(inst, req, response)
    finally:
        _release(inst, req.task_id)
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
    uploads = await _uploads(state, caller, req)
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    await _prepare_keyed(state, inst, req, ticket)
    req.webhook = await _request_webhook(state, inst, caller, req, ticket)
    await _store_uploads(state, inst, caller, req, uploads, ticket)
    timeout = req.timeout if req.timeout is not None else state.config.settings.message_timeout
    stored = asyncio.Event()

    events = inst.swarm.stream_events(
        req.body,
        timeout=timeout,
        ping_interval=state.config.settings.sse_ping_interval,
        on_stored=stored.set,
        detached=True,  # an enqueued message waits for its turn, whatever its timeout
        **_post_kwargs(state, req),
    )

    async def run() -> None:
        try:
            async with state.instances.lease(inst):
                async for _event in events:
                    _release(inst, req.task_id)  # submitted: the task's state answers now
        finally:
            _release(inst, req.task_id)
        answered(state, inst, req.task_id)

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

    The caller's stream slot is taken first: at the limit the answer is 429 and no task starts.
    """
    slot = state.stream_slots.acquire(caller.role, caller.id)
    try:
        uploads = await _uploads(state, caller, req)
        inst = await state.instances.get(caller.role, caller.id, caller.api_key)
        await _prepare_keyed(state, inst, req, ticket)
        hook = await _request_webhook(state, inst, caller, req, ticket)
        await _store_uploads(state, inst, caller, req, uploads, ticket)
        timeout = req.timeout if req.timeout is not None else state.config.settings.message_timeout
        # Set once the store committed the submission (Swarm.submit_events): the response's
        # headers wait for it, as a plain answer waits for its commit.
        stored = asyncio.Event()

        events = inst.swarm.stream_events(
            req.body,
            timeout=timeout,
            ping_interval=state.config.settings.sse_ping_interval,
            on_stored=stored.set,
            **_post_kwargs(state, req),
        )

        async def leased() -> AsyncIterator[Any]:
            # Keep the instance from being reclaimed while the stream is open.
            try:
                async with state.instances.lease(inst):
                    async for event in events:
                        _release(inst, req.task_id)  # submitted: the task's state answers now
                        yield event
            finally:
                _release(inst, req.task_id)
            answered(state, inst, req.task_id)  # the whole stream went out
            if ticket is not None:
                # A repeat attaches to the task's events, which hold all of it: no outcome
                # row (`STREAMED_OUTCOME`) once the task ended.
                ticket.task_ended(inst, req)

        response = event_stream_response(
            leased(),
            max_buffer_bytes=state.config.settings.sse_max_buffer_bytes,
            stall_timeout=state.config.settings.sse_slow_reader_timeout,
            task_id=req.task_id,
            streams=state.open_streams,
            slot=slot,
            # Nothing, headers included, leaves before the submission is committed.
            opened=stored,
        )
        name_webhook(response, hook)
        return response
    except BaseException:
        slot.release()
        raise


def name_webhook(response: Any, hook: dict[str, Any] | None) -> None:
    """A stream names the message's own webhook (``{"id", "secret"}``) in its headers: the
    first answer and every replay of it by its Idempotency-Key alike."""
    if hook is not None:
        response.headers["MAIL-Webhook-Id"] = hook["id"]
        if hook["secret"]:
            response.headers["MAIL-Webhook-Secret"] = hook["secret"]
