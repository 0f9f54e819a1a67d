"""A2A ``SendMessage`` is idempotent by ``messageId``: a message sent again is not run again."""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
)
from a2a.utils.errors import InvalidParamsError


@dataclass
class _Sent:
    """One caller's message: the task it started (once known) and the first call's result."""

    task_id: asyncio.Future[str | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    result: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    fingerprint: bytes = b""  # of the message (`_fingerprint`): a repeat must match it

    def started(self, task_id: str | None) -> None:
        if not self.task_id.done():
            self.task_id.set_result(task_id)

    def ended(self, result: Any) -> None:
        self.started(result.id if isinstance(result, Task) else None)
        if not self.result.done():
            self.result.set_result(_slim(result))

    def failed(self, exc: BaseException) -> None:
        for future in (self.task_id, self.result):
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: nobody may be waiting


def _as_error(exc: BaseException) -> Exception:
    if isinstance(exc, Exception):
        return exc
    return RuntimeError("the first request with this messageId ended before it started a task")


def _slim(result: Any) -> Any:
    """What a repeat falls back on once the task record is gone: the task's id, context and
    last status, not its history and artifacts (up to ``max_messages`` of these are kept per
    caller, so a whole copy of each task would double what a task costs)."""
    if not isinstance(result, Task):
        return result
    slim = Task(id=result.id, context_id=result.context_id)
    slim.status.CopyFrom(result.status)
    return slim


def _fingerprint(message: Message) -> bytes:
    """What makes two messages with one id the same message: everything but the metadata
    and extensions (which a client may set anew on a retry), serialized deterministically."""
    content = Message()
    content.CopyFrom(message)
    content.ClearField("metadata")
    del content.extensions[:]
    return hashlib.sha256(content.SerializeToString(deterministic=True)).digest()


def _task_id_of(event: Any) -> str | None:
    if isinstance(event, Task):
        return event.id or None
    return getattr(event, "task_id", None) or None


class MessageIdDedupingHandler(DefaultRequestHandler):
    """The SDK's request handler, with sends deduplicated per caller by ``messageId``."""

    def __init__(self, *args: Any, max_messages: int = 1000, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_messages = max_messages  # per caller; 0 = no bound
        self._sent: dict[str, OrderedDict[str, _Sent]] = {}

    def _claim(self, params: SendMessageRequest, context: ServerCallContext) -> tuple[_Sent, bool]:
        """(the message's record, whether this call is the first with its id)."""
        message_id = params.message.message_id
        if not message_id:
            return _Sent(), True
        owner = resolve_user_scope(context)
        sent = self._sent.setdefault(owner, OrderedDict())
        found = sent.get(message_id)
        fingerprint = _fingerprint(params.message)
        if found is not None:
            if found.fingerprint != fingerprint:
                raise InvalidParamsError(
                    message=f"messageId {message_id!r} was already used for a different "
                    "message; send each new message with a new messageId (a repeat with the "
                    "same id is only for resending the same message)"
                )
            return found, False
        record = sent[message_id] = _Sent(fingerprint=fingerprint)
        while self._max_messages and len(sent) > self._max_messages:
            sent.popitem(last=False)
        return record, True

    def _forget(self, params: SendMessageRequest, context: ServerCallContext) -> None:
        owner = resolve_user_scope(context)
        self._sent.get(owner, OrderedDict()).pop(params.message.message_id, None)

    async def _current(self, task_id: str, context: ServerCallContext, fallback: Any) -> Any:
        try:
            task = await self.on_get_task(GetTaskRequest(id=task_id), context)
        except Exception:  # noqa: BLE001 - the record was forgotten: the first call's result
            return fallback
        return task if task is not None else fallback

    async def on_message_send(  # type: ignore[override]
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Any:
        sent, first = self._claim(params, context)
        if not first:
            result = await asyncio.shield(sent.result)
            task_id = sent.task_id.result()
            return await self._current(task_id, context, result) if task_id else result
        try:
            result = await super().on_message_send(params, context)
        except BaseException as exc:
            self._forget(params, context)  # it did not run: a retry may
            sent.failed(_as_error(exc))
            raise
        sent.ended(result)
        return result

    async def on_message_send_stream(  # type: ignore[override]
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        sent, first = self._claim(params, context)
        if not first:
            async for event in self._follow(sent, context):
                yield event
            return
        last: Any = None
        try:
            async for event in super().on_message_send_stream(params, context):
                sent.started(_task_id_of(event))
                last = event
                yield event
        except BaseException as exc:
            if sent.task_id.done():  # the task runs on (a client that left, say)
                sent.ended(last)
            else:
                self._forget(params, context)  # it did not start: a retry may
                sent.failed(_as_error(exc))
            raise
        sent.ended(last)

    async def _follow(self, sent: _Sent, context: ServerCallContext) -> AsyncGenerator[Any, None]:
        """A streamed repeat: the first message's task, live while it runs."""
        task_id = await asyncio.shield(sent.task_id)
        if task_id is None:  # the first call answered with a message, not a task
            yield await asyncio.shield(sent.result)
            return
        task = await self._current(task_id, context, None)
        if task is None or task.status.state in TERMINAL_TASK_STATES:
            yield task if task is not None else await asyncio.shield(sent.result)
            return
        async for event in self.on_subscribe_to_task(SubscribeToTaskRequest(id=task_id), context):
            yield event
