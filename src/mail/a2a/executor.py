"""The A2A ``AgentExecutor`` that runs A2A messages as MAIL tasks of the caller's instance."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from a2a.helpers.proto_helpers import (
    get_data_parts,
    get_text_parts,
    new_data_part,
    new_task,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import TaskState
from fastapi import HTTPException

from mail.a2a import mapping
from mail.a2a.cancel import CANCELLED_SUBJECT
from mail.a2a.service import run_events
from mail.server.bodies import parse_message_request
from mail.store.base import StoreUnavailableError

logger = logging.getLogger("mail.a2a")

_SHUTDOWN_SUBJECT = "::shutdown_requested::"  # the answer of a server shutting down
_PAUSES = {
    "waiting_for_breakpoint": mapping.PAUSE_BREAKPOINT,
    "waiting_for_review": mapping.PAUSE_REVIEW,
}
CANCELLED_TEXT = "The task was cancelled."


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


def caller_of(context: Any) -> Any:
    """The MAIL caller of a request (a ``RequestContext`` or a ``ServerCallContext``)."""
    state = getattr(context, "call_context", context).state
    caller = state.get("mail_caller")
    if caller is None:  # the bridge's routes always authenticate first
        raise RuntimeError("A2A request without an authenticated MAIL caller")
    return caller


class Cancel:
    """One cancel of an A2A task in flight: undecided, then whether it ends the task."""

    __slots__ = ("decided", "stops")

    def __init__(self) -> None:
        self.decided = asyncio.Event()
        self.stops = False

    def decide(self, stops: bool) -> None:
        if not self.decided.is_set():
            self.stops = stops
            self.decided.set()


class MAILAgentExecutor(AgentExecutor):
    def __init__(self, state: Callable[[], Any]) -> None:
        self._state = state
        # A2A task ids whose `execute` is in flight, and the cancels in flight per task (two
        # cancels of one task may overlap).
        self._running: set[str] = set()
        self._cancelling: dict[str, list[Cancel]] = {}
        # Running A2A task ids -> set once their message is in MAIL (or `execute` ended).
        self._submitted: dict[str, asyncio.Event] = {}

    def is_running(self, task_id: str) -> bool:
        return task_id in self._running

    async def submission(self, task_id: str, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until the message ``execute`` is handing to
        MAIL for ``task_id`` is there, or ``execute`` ended without it."""
        submitted = self._submitted.get(task_id)
        if submitted is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await submitted.wait()

    def is_cancelling(self, task_id: str) -> bool:
        return task_id in self._cancelling

    @contextlib.contextmanager
    def cancelling(self, task_id: str) -> Iterator[Cancel]:
        """A cancel of ``task_id`` in flight. Its holder calls ``decide(True)`` once it will
        write ``canceled``; a cancel that ends undecided (refused, failed) stopped nothing,
        and ``execute``, waiting for it, writes its own state."""
        cancel = Cancel()
        self._cancelling.setdefault(task_id, []).append(cancel)
        try:
            yield cancel
        finally:
            cancel.decide(False)
            cancels = self._cancelling[task_id]
            cancels.remove(cancel)
            if not cancels:
                del self._cancelling[task_id]

    async def _cancel_wins(self, task_id: str) -> bool:
        """Whether a cancel in flight ends ``task_id``, waiting until each one has decided.
        ``execute`` has handed its message over (or never will) by now: a cancel waiting for
        that goes on at once."""
        cancels = list(self._cancelling.get(task_id, ()))
        if not cancels:
            return False
        submitted = self._submitted.get(task_id)
        if submitted is not None:
            submitted.set()
        for cancel in cancels:
            await cancel.decided.wait()
        return any(cancel.stops for cancel in cancels)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        current = context.current_task
        if current is not None and current.status.state in TERMINAL_TASK_STATES:
            # The request handler refuses messages to an ended task; one that got queued
            # behind the task's last message anyway changes nothing (no COMPLETED -> WORKING).
            logger.info("A2A task %s has ended: a message queued behind it is dropped", task_id)
            return
        self._running.add(task_id)
        submitted = self._submitted[task_id] = asyncio.Event()
        try:
            await self._execute(context, event_queue, task_id, submitted.set)
        finally:
            self._running.discard(task_id)
            submitted.set()
            if self._submitted.get(task_id) is submitted:
                del self._submitted[task_id]

    async def _execute(
        self,
        context: RequestContext,
        event_queue: EventQueue,
        task_id: str,
        on_submitted: Callable[[], None],
    ) -> None:
        state = self._state()
        caller = caller_of(context)
        context_id = context.context_id or ""
        message = context.message
        # Acknowledged means stored: the caller hears of its task (the new Task, then
        # `working`) only once MAIL has committed the task and the caller's message, so a
        # kill -9 right after the first event it sees cannot take the task back.
        unannounced = None
        if context.current_task is None:
            history = [message] if message is not None else []
            unannounced = new_task(
                task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history
            )
        updater = TaskUpdater(event_queue, task_id, context_id)

        async def announce() -> None:
            nonlocal unannounced
            if unannounced is not None:
                first, unannounced = unannounced, None
                await event_queue.enqueue_event(first)

        started = False  # the MAIL task is stored and the caller told it is working

        async def stored() -> None:
            nonlocal started
            await announce()
            await updater.start_work()
            started = True
            on_submitted()

        parts = list(message.parts) if message is not None else []
        mail_id = mapping.mail_task_id(context_id)
        try:
            req = parse_message_request(
                mapping.inbound_request(get_text_parts(parts), get_data_parts(parts), mail_id)
            )
        except HTTPException as exc:
            await announce()
            await self._say(updater, TaskState.TASK_STATE_REJECTED, _refusal(exc))
            return
        answer: str | None = None
        failed = superseded = False
        progress = shows_progress(context)
        try:
            async for event in run_events(state, caller, req, stored):
                if event.event == "ping":
                    continue
                if event.id is None and event.event in ("task_complete", "task_error"):
                    closing = json.loads(event.data)
                    answer = str(closing.get("response", ""))
                    failed = event.event == "task_error"
                    # A newer message in the context interrupted or rolled back this one
                    # (multitask_strategy): its MAIL task runs on, this A2A task is over.
                    superseded = closing.get("state") == "running"
                    break
                if not progress or task_id in self._cancelling:
                    continue
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    metadata=mapping.event_metadata(event.event, event.id, event.data),
                )
        except (HTTPException, StoreUnavailableError) as exc:
            await announce()
            # Refused before it ran: rejected; a store failing after it started: failed.
            refused = TaskState.TASK_STATE_FAILED if started else TaskState.TASK_STATE_REJECTED
            await self._say(updater, refused, _refusal(exc))
            return
        await announce()
        if superseded:
            await self._say(updater, TaskState.TASK_STATE_CANCELED, answer or "")
            return
        await self._finish(state, caller, updater, mail_id, answer or "", failed)

    async def _finish(
        self, state: Any, caller: Any, updater: TaskUpdater, mail_id: str, answer: str, failed: bool
    ) -> None:
        if await self._cancel_wins(updater.task_id):
            return  # a cancel is ending the task: it writes the state
        inst = state.instances.peek(caller.role, caller.id)
        task = inst.swarm.get_task_by_id(mail_id) if inst is not None else None
        response = getattr(task, "response", None) or {}
        subject = response.get("message", {}).get("subject", "") if response else ""
        if subject == CANCELLED_SUBJECT:  # cancelled outside A2A (POST /task/cancel, ...)
            await self._say(updater, TaskState.TASK_STATE_CANCELED, answer)
            return
        pause = _PAUSES.get(task.state.value) if task is not None else None
        if pause is not None:
            payload = mapping.pause_payload(pause, answer, mail_id)
            await updater.requires_input(
                updater.new_agent_message([new_text_part(answer), new_data_part(payload)])
            )
            return
        ended_failed = task is not None and task.state.value == "failed"
        if failed or ended_failed or subject == _SHUTDOWN_SUBJECT:
            await self._say(updater, TaskState.TASK_STATE_FAILED, answer)
            return
        await updater.add_artifact([new_text_part(answer)], name="response", last_chunk=True)
        await updater.complete(updater.new_agent_message([new_text_part(answer)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # The MAIL task was stopped by the request handler before the SDK called this.
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await _say(updater, TaskState.TASK_STATE_CANCELED, CANCELLED_TEXT)

    async def _say(self, updater: TaskUpdater, state: int, text: str) -> None:
        if not await self._cancel_wins(updater.task_id):
            await _say(updater, state, text)


def _refusal(exc: HTTPException | StoreUnavailableError) -> str:
    """What the caller is told of a refusal: the status and detail `POST /message` answers."""
    if isinstance(exc, StoreUnavailableError):  # (503, as `mail.server.errors` answers it)
        return f"503: {exc}"
    return f"{exc.status_code}: {exc.detail}"


async def _say(updater: TaskUpdater, state: int, text: str) -> None:
    await updater.update_status(state, updater.new_agent_message([new_text_part(text)]))  # type: ignore[arg-type]
