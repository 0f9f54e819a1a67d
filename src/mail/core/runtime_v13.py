"""The parts of MAILRuntime's Python API that exist for code written against v1.3.

`MAILRuntime` inherits them: the ``sse_starlette`` shapes of events and streams, the answer
queue, and the interswarm bridge's start and stop (built by the API layer's connector,
since mail.net and mail.stdlib sit above the runtime).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from mail.core.compat import RecentQueue, server_sent_event_stream, server_sent_events
from mail.core.message import MAILMessage

if TYPE_CHECKING:
    from sse_starlette import ServerSentEvent

    from mail.core.events import TaskEvent
    from mail.core.tasks import MAILTask

# Builds the interswarm bridge of `start_interswarm` (mail.api sits above the runtime).
INTERSWARM_CONNECTOR = "mail.api.instance_wiring:connect_interswarm"

# The key of one agent's history on one task in `agent_histories` (v1.3's name for it).
AGENT_HISTORY_KEY = "{task_id}::{agent_name}"

# How many answers `response_queue` keeps when nobody reads them.
RESPONSE_QUEUE_SIZE = 1000


class V13Surface:
    """Mixed into MAILRuntime (whose attributes these methods use)."""

    if TYPE_CHECKING:
        interswarm: Any
        enable_interswarm: bool
        swarm_registry: Any
        _response_queue: RecentQueue | None
        mail_tasks: dict[str, MAILTask]
        response_messages: dict[str, MAILMessage]
        waiters: Any

        def get_task_events(self, task_id: str) -> list[TaskEvent]: ...

        def stream_task_events(self, *args: Any, **kwargs: Any) -> AsyncIterator[TaskEvent]: ...

    def get_task_by_id(self, task_id: str) -> MAILTask | None:
        return self.mail_tasks.get(task_id)

    @property
    def pending_requests(self) -> dict[str, asyncio.Future[MAILMessage]]:
        return {t: futs[0] for t, futs in self.waiters.futures.items() if futs}

    def get_response_message(self, task_id: str) -> MAILMessage | None:
        """The answer a task gave its caller (None while it has none)."""
        return self.response_messages.get(task_id)

    def get_events_by_task_id(self, task_id: str) -> list[ServerSentEvent]:
        """The task's events as ``sse_starlette.ServerSentEvent`` objects whose ``data`` is a
        dict (the v1.3 shape); `get_task_events` gives the TaskEvent records."""
        return server_sent_events(self.get_task_events(task_id))

    @property
    def response_queue(self) -> asyncio.Queue[tuple[str, MAILMessage]]:
        """v1.3's queue of answers: ``(task_id, response)`` for every task answered after
        the first time this is read (the newest RESPONSE_QUEUE_SIZE are kept)."""
        if self._response_queue is None:
            self._response_queue = RecentQueue(RESPONSE_QUEUE_SIZE)
        return self._response_queue

    @property
    def interswarm_router(self) -> Any:
        """The InterswarmRouter this instance sends through (None while interswarm is off)."""
        return None if self.interswarm is None else self.interswarm.router

    def submit_and_stream(
        self,
        message: MAILMessage,
        timeout: float = 3600.0,
        resume_from: str | None = None,
        ping_interval: float = 15.0,
        **kwargs: Any,
    ) -> AsyncIterator[ServerSentEvent]:
        """`stream_task_events` as ``sse_starlette.ServerSentEvent`` objects (the v1.3 shape)."""
        return server_sent_event_stream(
            self.stream_task_events(message, timeout, resume_from, ping_interval, **kwargs)
        )

    async def start_interswarm(self) -> None:
        """Connect to other swarms through `swarm_registry` (when `enable_interswarm`).

        The bridge lives in the layers above the runtime (mail.net, with discovery from
        mail.stdlib), so it is built by the API layer's connector, looked up by name.
        """
        if not self.enable_interswarm or self.interswarm is not None:
            return
        module, _, name = INTERSWARM_CONNECTOR.partition(":")
        connect = getattr(importlib.import_module(module), name)
        await connect(self, self.swarm_registry)

    async def stop_interswarm(self) -> None:
        bridge, self.interswarm = self.interswarm, None
        if bridge is not None:
            await bridge.stop()

    async def is_interswarm_running(self) -> bool:
        return self.interswarm is not None
