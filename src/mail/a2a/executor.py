"""The A2A ``AgentExecutor`` that runs A2A messages as MAIL tasks of the caller's instance.

One A2A message is one MAIL message (``mapping.inbound_message``); the MAIL task is the A2A
context (``mapping.mail_task_id``). While the task runs, each MAIL event becomes a
``working`` status update whose metadata carries it (``mail_event``: name, per-task id and
data); the task's answer becomes the ``response`` artifact and the ``completed`` status. A
breakpoint or review pause becomes ``input-required`` with a data part saying what to send
back (``mapping.pause_payload``). What ``POST /message`` refuses (400, 404, 409, 413, 429)
becomes ``rejected`` with the same explanation; a task error or timeout ``failed``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from a2a.helpers.proto_helpers import (
    get_data_parts,
    get_text_parts,
    new_data_part,
    new_task,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import TaskState
from fastapi import HTTPException

from mail.a2a import mapping
from mail.a2a.cancel import CANCELLED_SUBJECT, cancel_caller_task
from mail.a2a.service import run_events
from mail.server.bodies import MessageRequest

logger = logging.getLogger("mail.a2a")

_FAILED_SUBJECTS = frozenset({"::task_error::", "::task_timeout::", "::shutdown_requested::"})
_PAUSES = {
    "waiting_for_breakpoint": mapping.PAUSE_BREAKPOINT,
    "waiting_for_review": mapping.PAUSE_REVIEW,
}


# A blocking send (neither streamed nor `returnImmediately`) answers with the final task only.
_BLOCKING_METHODS = frozenset({"SendMessage", "message/send"})


def shows_progress(context: RequestContext) -> bool:
    """Whether anyone can see the task's `working` updates while it runs: a stream, or a
    send that returns at once (its caller polls or subscribes). A blocking send's caller sees
    only the final task, so an update per MAIL event would be work for nobody (each one is a
    task copy and a store write in the SDK)."""
    if context.call_context.state.get("a2a_method") not in _BLOCKING_METHODS:
        return True
    config = context.configuration
    return bool(config is not None and config.return_immediately)


def caller_of(context: RequestContext) -> Any:
    caller = context.call_context.state.get("mail_caller")
    if caller is None:  # the bridge's routes always authenticate first
        raise RuntimeError("A2A request without an authenticated MAIL caller")
    return caller


class MAILAgentExecutor(AgentExecutor):
    def __init__(self, state: Callable[[], Any]) -> None:
        self._state = state
        # A2A task ids whose `execute` is in flight, and those of them an A2A `CancelTask`
        # is ending (that path writes the canceled state; any other MAIL cancel, such as
        # POST /task/cancel, leaves it to `execute`).
        self._running: set[str] = set()
        self._cancelling: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        self._running.add(task_id)
        try:
            await self._execute(context, event_queue, task_id)
        finally:
            self._running.discard(task_id)
            self._cancelling.discard(task_id)

    async def _execute(
        self, context: RequestContext, event_queue: EventQueue, task_id: str
    ) -> None:
        state = self._state()
        caller = caller_of(context)
        context_id = context.context_id or ""
        message = context.message
        if context.current_task is None:
            history = [message] if message is not None else []
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        parts = list(message.parts) if message is not None else []
        inbound = mapping.inbound_message(get_text_parts(parts), get_data_parts(parts))
        if not inbound.body and inbound.resume_from is None:
            await _say(updater, TaskState.TASK_STATE_REJECTED, "no message provided")
            return
        mail_id = mapping.mail_task_id(context_id)
        req = MessageRequest(
            body=inbound.body,
            subject=inbound.subject,
            entrypoint=inbound.entrypoint,
            task_id=mail_id,
            resume_from=inbound.resume_from,
            kwargs=inbound.kwargs,
        )
        await updater.start_work()
        answer: str | None = None
        failed = False
        progress = shows_progress(context)
        try:
            async for event in run_events(state, caller, req):
                if event.event == "ping":
                    continue
                if event.id is None and event.event in ("task_complete", "task_error"):
                    answer = str(json.loads(event.data).get("response", ""))
                    failed = event.event == "task_error"
                    break
                if not progress:
                    continue
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    metadata=mapping.event_metadata(event.event, event.id, event.data),
                )
        except HTTPException as exc:
            await _say(updater, TaskState.TASK_STATE_REJECTED, f"{exc.status_code}: {exc.detail}")
            return
        await self._finish(state, caller, updater, mail_id, answer or "", failed)

    async def _finish(
        self, state: Any, caller: Any, updater: TaskUpdater, mail_id: str, answer: str, failed: bool
    ) -> None:
        inst = state.instances.peek(caller.role, caller.id)
        task = inst.swarm.get_task_by_id(mail_id) if inst is not None else None
        response = getattr(task, "response", None) or {}
        subject = response.get("message", {}).get("subject", "") if response else ""
        if subject == CANCELLED_SUBJECT:
            if updater.task_id not in self._cancelling:  # cancelled outside A2A
                await _say(updater, TaskState.TASK_STATE_CANCELED, answer)
            return
        pause = _PAUSES.get(task.state.value) if task is not None else None
        if pause is not None:
            payload = mapping.pause_payload(pause, answer, mail_id)
            await updater.requires_input(
                updater.new_agent_message([new_text_part(answer), new_data_part(payload)])
            )
            return
        if failed or subject in _FAILED_SUBJECTS:
            await _say(updater, TaskState.TASK_STATE_FAILED, answer)
            return
        await updater.add_artifact([new_text_part(answer)], name="response", last_chunk=True)
        await updater.complete(updater.new_agent_message([new_text_part(answer)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        state = self._state()
        caller = caller_of(context)
        context_id = context.context_id or ""
        if context.task_id in self._running:
            self._cancelling.add(context.task_id)
        try:
            await cancel_caller_task(
                state, caller, mapping.mail_task_id(context_id), "cancelled over A2A"
            )
        except HTTPException:
            pass  # no MAIL task yet (rejected before it started): only the A2A task ends
        updater = TaskUpdater(event_queue, context.task_id or "", context_id)
        await _say(updater, TaskState.TASK_STATE_CANCELED, "The task was cancelled.")


async def _say(updater: TaskUpdater, state: int, text: str) -> None:
    await updater.update_status(state, updater.new_agent_message([new_text_part(text)]))  # type: ignore[arg-type]
