"""The bridge's A2A request handler: the SDK's own, with MAIL's rules where they differ."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from a2a.server.agent_execution.active_task import (
    INTERRUPTED_TASK_STATES,
    TERMINAL_TASK_STATES,
)
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import TaskStore
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi import HTTPException

from mail.a2a import mapping
from mail.a2a.cancel import cancel_caller_task
from mail.a2a.executor import MAILAgentExecutor, caller_of
from mail.a2a.service import was_cancelled
from mail.utils.echo import echo

# Seconds a cancel waits for a message still being handed to MAIL (see `_cancel_mail`).
SUBMISSION_WAIT = 30.0


def _state_name(task: Task) -> str:
    return TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _check_role(message: Message) -> None:
    if message.role == Role.ROLE_AGENT:
        raise InvalidParamsError(
            message="message.role is ROLE_AGENT, the role of the agent's own messages: a "
            "message sent to this agent is the user's (ROLE_USER)"
        )


class MAILRequestHandler(DefaultRequestHandler):
    def __init__(
        self,
        state: Callable[[], Any],
        task_store: TaskStore,
        agent_card: AgentCard,
        interrupted_task_timeout: float | None,
        **push: Any,
    ) -> None:
        self._executor = MAILAgentExecutor(state)
        self._state = state
        self._records = task_store
        super().__init__(
            agent_executor=self._executor,
            task_store=task_store,
            agent_card=agent_card,
            interrupted_task_timeout=interrupted_task_timeout,
            **push,
        )
        # (caller, A2A task id) a message is being handed to (from its checks until its
        # request ends), or a settling cancel is ending.
        self._accepting: set[tuple[str, str]] = set()

    def tasks_in_memory(self) -> int:
        """A2A tasks whose in-memory machinery (queues, producer and consumer) is alive."""
        return len(getattr(self._active_task_registry, "_active_tasks", ()))

    # -- messages ---------------------------------------------------------------------------
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        _check_role(params.message)
        async with self._one_message(params.message.task_id, context):
            return await super().on_message_send(params, context)

    async def on_message_send_stream(  # type: ignore[override]
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        _check_role(params.message)
        stream = super().on_message_send_stream(params, context)
        async with self._one_message(params.message.task_id, context), contextlib.aclosing(stream):
            async for event in stream:
                yield event

    def _busy(self, task_id: str, context: ServerCallContext) -> bool:
        """A message is being handed to the caller's task, or its execution is under way."""
        held = (resolve_user_scope(context), task_id) in self._accepting
        return held or self._executor.is_running(task_id)

    @contextlib.asynccontextmanager
    async def _one_message(self, task_id: str, context: ServerCallContext) -> AsyncIterator[None]:
        """Hold ``task_id`` for one message, or refuse the message (see the module doc)."""
        if not task_id:
            yield
            return
        hold = (resolve_user_scope(context), task_id)
        if hold in self._accepting:
            raise _working(task_id)
        self._accepting.add(hold)
        try:
            task = await self._records.get(task_id, context)
            if task is not None:  # (an unknown task is the SDK's "task not found")
                if self._executor.is_running(task_id) or self._executor.is_cancelling(task_id):
                    raise _working(task_id)
                if task.status.state in TERMINAL_TASK_STATES:
                    raise UnsupportedOperationError(
                        message=f"task {task_id} has ended ({_state_name(task)}) and takes no "
                        "more messages: send the message in a new task of the same context "
                        "(contextId without taskId)"
                    )
                if task.status.state not in INTERRUPTED_TASK_STATES:
                    raise _working(task_id)
            yield
        finally:
            self._accepting.discard(hold)

    # -- cancel -----------------------------------------------------------------------------
    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        task_id = params.id
        task = await self._records.get(task_id, context)
        if task is None:
            raise TaskNotFoundError
        if task.status.state in TERMINAL_TASK_STATES:
            raise TaskNotCancelableError(
                message=f"task {task_id} has already ended ({_state_name(task)})"
            )
        with self._executor.cancelling(task_id) as cancel:
            stopped = await self._cancel_mail(task, context)
            if stopped is False:
                # The MAIL task had already finished: unless the A2A task is only waiting
                # for input, its own answer is on its way and ends it.
                now = await self._records.get(task_id, context)
                parked = now is not None and now.status.state in INTERRUPTED_TASK_STATES
                if not parked or self._busy(task_id, context):
                    state = _state_name(now) if now is not None else "ended"
                    raise TaskNotCancelableError(
                        message=f"task {task_id} had already finished its work ({state}): "
                        "nothing was cancelled, and it ends with its own answer"
                    )
            cancel.decide(True)
            return await super().on_cancel_task(params, context)

    async def _cancel_mail(self, task: Task, context: ServerCallContext) -> bool | None:
        """Stop the MAIL task of ``task``'s context: whether it stopped one (None: no task).

        A message still on its way into MAIL (the caller's instance being created, the
        store reads before it) is waited for first, then cancelled like a running one: the
        A2A task was announced, so its MAIL task exists and records the cancel (and a
        continuation of a finished MAIL task is cancelled, not refused as finished)."""
        await self._executor.submission(task.id, SUBMISSION_WAIT)
        mail_id = mapping.mail_task_id(task.context_id)
        try:
            outcome = await cancel_caller_task(
                self._state(), caller_of(context), mail_id, "cancelled over A2A"
            )
        except HTTPException:
            return None  # no MAIL task (refused before it started): the A2A task only
        return bool(outcome["cancelled"])

    # -- reads: a wait whose MAIL task was cancelled elsewhere is over -----------------------
    async def _settle(self, task: Task, context: ServerCallContext) -> bool:
        """End ``task`` as canceled when it waits for input and its MAIL task was cancelled
        another way; whether it did."""
        if task.status.state not in INTERRUPTED_TASK_STATES or self._busy(task.id, context):
            return False
        if self._executor.is_cancelling(task.id):
            return False  # a CancelTask under way writes the state (and says it cancelled)
        mail_id = mapping.mail_task_id(task.context_id)
        if not was_cancelled(self._state(), caller_of(context), mail_id):
            return False
        hold = (resolve_user_scope(context), task.id)
        self._accepting.add(hold)  # no message slips in while it ends
        try:
            with (
                self._executor.cancelling(task.id) as cancel,
                contextlib.suppress(TaskNotCancelableError, TaskNotFoundError),
            ):
                cancel.decide(True)
                await super().on_cancel_task(CancelTaskRequest(id=task.id), context)
        finally:
            self._accepting.discard(hold)
        return True

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        task = await super().on_get_task(params, context)
        if task is not None and await self._settle(task, context):
            task = await super().on_get_task(params, context)
        return task

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        page = await super().on_list_tasks(params, context)
        settled = False
        for task in list(page.tasks):
            settled = await self._settle(task, context) or settled
        return await super().on_list_tasks(params, context) if settled else page

    async def on_subscribe_to_task(  # type: ignore[override]
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        task = await self._records.get(params.id, context)
        if task is not None:
            await self._settle(task, context)
        async with contextlib.aclosing(super().on_subscribe_to_task(params, context)) as stream:
            async for event in stream:
                yield event


def _working(task_id: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        message=f"task {echo(task_id)} is still working on an earlier message (one message at a time "
        "per task): wait until it completes or asks for input (SubscribeToTask follows it), or "
        "send in a new task of the same context"
    )
