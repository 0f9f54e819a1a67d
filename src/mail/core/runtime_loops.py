"""The scheduling loops of MAILRuntime (mixed into it).

``run_continuous`` serves the mailbox until shutdown. Without it, each call (``run_task``,
``stream_events``) serves the mailbox on a temporary loop shared by the calls in flight
(``ephemeral_loop``); the last call out stops it. A continuous loop claims the mailbox at its
first step and takes over when the temporary loop has ended: two loops never serve one mailbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

from mail.core.actions import ActionOverrideFunction
from mail.core.mailbox import MailboxClosed
from mail.core.message import MAILMessage
from mail.core.tasks import RUNTIME_EVENTS

if TYPE_CHECKING:
    from mail.core.runtime import MAILRuntime

logger = logging.getLogger("mail.runtime")

RunMode = Literal["continuous", "manual"]


class LoopMixin:
    """run_continuous, run_task and the temporary loop (mixed into MAILRuntime)."""

    # The loop state (set in MAILRuntime.__init__).
    _loop_running: bool
    _stop_serving: bool
    _continuous: bool
    _shutdown: bool
    _ephemeral_task: asyncio.Task[None] | None
    _ephemeral_stopping: asyncio.Task[None] | None
    _ephemeral_saved: tuple[int | None, ActionOverrideFunction | None]
    _ephemeral_users: int
    _background: set[asyncio.Task[Any]]

    async def run_continuous(
        self: MAILRuntime,
        max_steps: int | None = None,
        action_override: ActionOverrideFunction | None = None,
        mode: RunMode = "continuous",
    ) -> None:
        """Serve the mailbox until shutdown. From its first step, calls queue on this loop; a
        temporary loop already serving calls keeps them, and this one takes over when it ends."""
        if self._continuous:
            raise RuntimeError("the runtime loop is already running")
        self._continuous = True
        served = False
        try:
            while (temporary := self._ephemeral_stopping or self._ephemeral_task) is not None:
                if self._shutdown:  # the temporary loop ends, though a user may stay (a stream)
                    return
                await asyncio.wait({temporary})  # until its last user has restored the settings
            served = True
            saved = (self.max_steps, self.action_override, self.mode)
            self.max_steps = max_steps
            self.action_override = action_override
            self.mode = mode
            try:
                await self._serve()
            finally:  # a later temporary loop must not run in this loop's (e.g. manual) mode
                self.max_steps, self.action_override, self.mode = saved
        finally:
            self._continuous = False
            if not served and not self._shutdown:
                self._serve_stranded_calls()

    def _serve_stranded_calls(self: MAILRuntime) -> None:
        """Calls that queued behind this loop's claim, which ended before it served (cancelled
        during the hand-over), get a temporary loop until they have their answers."""
        waiting = [f for futures in self._waiters.values() for f in futures if not f.done()]
        if not waiting:
            return

        async def serve() -> None:
            async with self.ephemeral_loop(self.default_max_steps):
                await asyncio.wait(waiting)

        adopted = asyncio.create_task(serve(), name="mail-runtime-stranded-calls")
        self._background.add(adopted)
        adopted.add_done_callback(self._background.discard)

    async def run(self: MAILRuntime, action_override: ActionOverrideFunction | None = None) -> None:
        await self.run_continuous(action_override=action_override)

    async def run_task(
        self: MAILRuntime,
        message: MAILMessage,
        action_override: ActionOverrideFunction | None = None,
        resume_from: str | None = None,
        max_steps: int | None = None,
        timeout: float = 3600.0,
        **kwargs: Any,
    ) -> MAILMessage:
        """Run the loop only until `message`'s task completes; return its response.

        `max_steps` limits this task (like a request's `kwargs.max_steps`); without it the
        loop's limit applies (`default_max_steps` for a temporary loop).
        """
        if max_steps is not None:
            kwargs["max_steps"] = max_steps
        if self._continuous:
            return await self.submit_and_wait(message, timeout, resume_from, **kwargs)
        async with self.ephemeral_loop(self.default_max_steps, action_override):
            return await self.submit_and_wait(message, timeout, resume_from, **kwargs)

    @contextlib.asynccontextmanager
    async def ephemeral_loop(
        self: MAILRuntime,
        max_steps: int | None = None,
        action_override: ActionOverrideFunction | None = None,
    ) -> AsyncIterator[None]:
        """Serve the mailbox for the duration of the block unless a continuous loop runs.

        Concurrent users share one temporary loop; the last one out stops it and restores
        the loop settings (max_steps, action_override) that were in place before.
        """
        while not self._continuous and self._ephemeral_stopping is not None:
            await asyncio.wait({self._ephemeral_stopping})
        if self._continuous:  # checked again after waiting: a continuous loop may have begun
            yield
            return
        self._ephemeral_users += 1
        started = self._ephemeral_task is None
        if started:
            self._ephemeral_saved = (self.max_steps, self.action_override)
            self.max_steps = max_steps
            self.action_override = action_override
            self._ephemeral_task = asyncio.create_task(self._serve())
        try:
            if started:  # inside the try: a cancellation here must still count this user out
                await asyncio.sleep(0)
            yield
        finally:
            self._ephemeral_users -= 1
            if self._ephemeral_users == 0 and self._ephemeral_task is not None:
                serve, self._ephemeral_task = self._ephemeral_task, None
                self._ephemeral_stopping = serve
                self._stop_serving = True
                self.mailbox.put_wakeup()
                try:
                    await asyncio.shield(serve)
                finally:
                    self._ephemeral_stopping = None
                    self.max_steps, self.action_override = self._ephemeral_saved

    async def _serve(self: MAILRuntime) -> None:
        if self._loop_running:
            raise RuntimeError("the runtime loop is already running")
        self._loop_running = True
        self._stop_serving = False
        if self.journal is not None:
            self.journal.loop_started()  # tasks restored from a store continue
        try:
            while not self._stop_serving and not self._shutdown:
                try:
                    message = await self.mailbox.get()
                except MailboxClosed:
                    break
                if message is None:  # a wake-up without a message
                    continue
                try:
                    self._dispatch(message)
                except Exception as exc:  # noqa: BLE001 - the loop must survive
                    logger.exception("error while dispatching a message")
                    self._emit(message["message"]["task_id"], "run_loop_error", f"{exc}")
        except asyncio.CancelledError:
            self._emit(RUNTIME_EVENTS, "run_loop_cancelled", "run loop cancelled")
            raise
        finally:
            self._loop_running = False

    def _dispatch_pending(self: MAILRuntime) -> None:
        """Dispatch what is queued now, on behalf of a loop that is blocked on an empty queue.

        Called when an agent turn ends. Without it the loop would wake only after every other
        ready callback (e.g. a whole wave of turns finishing at once) had run; dispatching
        here starts the next agent sooner. Order is the mailbox's, as the loop would take it.
        """
        if not (self._loop_running and self.mailbox.consumer_waiting) or self._shutdown:
            return
        while not self._stop_serving:
            message = self.mailbox.get_nowait()
            if message is None:
                return
            try:
                self._dispatch(message)
            except Exception as exc:  # noqa: BLE001 - same policy as the loop
                logger.exception("error while dispatching a message")
                self._emit(message["message"]["task_id"], "run_loop_error", f"{exc}")
