"""What ``POST /message``, ``GET /tasks`` and ``GET /task`` mean, independent of HTTP parsing.

Routes parse and authorize, then call one function here. Each function works on the caller's
own instance only, which is what isolates users from each other.
"""

from __future__ import annotations

import difflib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException
from starlette.responses import StreamingResponse

from mail.core.review import RESUME_FROM_ACTION_REVIEW, ReviewDecisionError
from mail.core.runtime_review import ReviewPending
from mail.server.auth import Caller
from mail.server.bodies import MessageRequest
from mail.server.errors import BadRequest
from mail.server.instances import Instance
from mail.server.sse import event_record, event_stream_response
from mail.server.state import ServerState
from mail.server.team import parse_attachments, store_uploads

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
        f"parameter 'entrypoint': '{req.entrypoint}' is not an entrypoint agent of swarm '{state.swarm_name}'.{hint}"
    )


def _task_or_none(inst: Instance, task_id: str) -> Any | None:
    return inst.swarm.get_task_by_id(task_id)


def _prepare(state: ServerState, inst: Instance, req: MessageRequest) -> None:
    """Checks that need the caller's instance; fills in a task id when none was given."""
    _check_entrypoint(state, req)
    if req.resume_from is not None:
        if req.task_id is None:
            raise BadRequest("parameter 'task_id' is required when resume_from is set")
        if _task_or_none(inst, req.task_id) is None:
            if req.task_id in state.instances.archived_tasks(inst.kind, inst.id):
                raise HTTPException(
                    409,
                    f"task '{req.task_id}' belongs to an instance that was reclaimed while idle "
                    "and cannot be resumed without persistence (DATABASE_URL)",
                )
            raise HTTPException(404, f"task '{req.task_id}' not found")
    if req.task_id is not None:
        check_action_review(inst, req)
    if req.task_id is None:
        req.task_id = str(uuid.uuid4())


def check_action_review(inst: Instance, req: MessageRequest) -> None:
    """Decisions are checked before anything is submitted, so a bad resume changes nothing."""
    assert req.task_id is not None
    reviewer = inst.swarm.runtime.review
    try:
        reviewer.check_submit(req.task_id, req.resume_from)
    except ReviewPending as exc:
        raise HTTPException(409, str(exc)) from None
    if req.resume_from == RESUME_FROM_ACTION_REVIEW:
        try:
            reviewer.validate(req.task_id, req.kwargs.get("decisions"))
        except ReviewDecisionError as exc:
            raise BadRequest(str(exc)) from None


async def _uploads(state: ServerState, caller: Caller, req: MessageRequest) -> Any:
    """Validated uploads of the request (400/413 before any instance work)."""
    if req.attachments is None:
        return []
    return parse_attachments(req.attachments, state.config.team_tools.max_attachment_bytes)


async def _store_uploads(inst: Instance, caller: Caller, req: MessageRequest, uploads: Any) -> None:
    if uploads:
        assert req.task_id is not None
        req.kwargs["attachments"] = await store_uploads(inst.swarm, caller, req.task_id, uploads)


def _post_kwargs(state: ServerState, req: MessageRequest) -> dict[str, Any]:
    return dict(
        subject=req.subject,
        msg_type=req.msg_type,
        entrypoint=req.entrypoint,
        task_id=req.task_id,
        resume_from=req.resume_from,
        **req.kwargs,
    )


async def run_message(
    state: ServerState, caller: Caller, req: MessageRequest
) -> tuple[dict[str, Any], list[Any]]:
    """Submit and wait for the task's final MAILMessage; returns ``(message, events)``."""
    uploads = await _uploads(state, caller, req)
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    _prepare(state, inst, req)
    await _store_uploads(inst, caller, req, uploads)
    timeout = req.timeout if req.timeout is not None else state.config.settings.message_timeout
    async with state.instances.lease(inst):
        response, events = await inst.swarm.post_message(
            req.body, show_events=req.show_events, timeout=timeout, **_post_kwargs(state, req)
        )
    _log_outcome(inst, req.task_id, response)
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


async def post_message(state: ServerState, caller: Caller, req: MessageRequest) -> dict[str, Any]:
    """``POST /message`` without streaming: ``{"response", "events", "task_id"}``."""
    response, events = await run_message(state, caller, req)
    message = response.get("message", {}) if isinstance(response, dict) else {}
    return {
        "response": message.get("body", ""),
        "events": [event_record(e) for e in events] if req.show_events else None,
        "task_id": message.get("task_id") or req.task_id,
    }


async def stream_message(
    state: ServerState, caller: Caller, req: MessageRequest
) -> StreamingResponse:
    """Submit and stream the task's events as SSE, ending with ``task_complete``."""
    uploads = await _uploads(state, caller, req)
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    _prepare(state, inst, req)
    await _store_uploads(inst, caller, req, uploads)
    timeout = req.timeout if req.timeout is not None else state.config.settings.message_timeout
    events = inst.swarm.stream_events(
        req.body,
        timeout=timeout,
        ping_interval=state.config.settings.sse_ping_interval,
        **_post_kwargs(state, req),
    )

    async def leased() -> AsyncIterator[Any]:
        # Keep the instance from being reclaimed while the stream is open.
        async with state.instances.lease(inst):
            async for event in events:
                yield event

    return event_stream_response(
        leased(),
        max_buffer_bytes=state.config.settings.sse_max_buffer_bytes,
        stall_timeout=state.config.settings.sse_slow_reader_timeout,
        task_id=req.task_id,
    )


def _records_for(state: ServerState, caller: Caller, inst: Instance) -> dict[str, dict[str, Any]]:
    records = dict(state.instances.archived_tasks(caller.role, caller.id))
    for task_id, task in inst.swarm.get_all_tasks().items():
        if task_id == "*":  # runtime-internal pseudo-task of loop-level events
            continue
        records[task_id] = task_record(task)
    return records


def task_record(task: Any) -> dict[str, Any]:
    record = task.to_dict()
    events = record.get("events")
    if isinstance(events, list):
        record["events"] = [event_record(e, parse_data=False) for e in events]
    return record


def _remote_swarm_records(state: ServerState) -> dict[str, dict[str, Any]]:
    """Tasks that remote swarms contribute to on this server (their `swarm` instances)."""
    records: dict[str, dict[str, Any]] = {}
    for other in state.instances.all():
        if other.kind != "swarm":
            continue
        for task_id, task in other.swarm.get_all_tasks().items():
            if task_id != "*":
                records[task_id] = task_record(task)
    return records


async def list_tasks(state: ServerState, caller: Caller) -> dict[str, dict[str, Any]]:
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    inst.touch()
    records = _records_for(state, caller, inst)
    if caller.role == "admin":
        # Operators also see the work remote swarms do here; users only ever see their own.
        records = {**_remote_swarm_records(state), **records}
    return records


async def get_task(state: ServerState, caller: Caller, task_id: str) -> dict[str, Any]:
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    inst.touch()
    task = None if task_id == "*" else inst.swarm.get_task_by_id(task_id)
    if task is not None:
        return task_record(task)
    archived = state.instances.archived_tasks(caller.role, caller.id).get(task_id)
    if archived is not None:
        return archived
    raise HTTPException(404, f"task '{task_id}' not found")
