"""The scheduling loops of the runtime (`LoopRunner`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Literal, Protocol

from mail.core.actions import ActionOverrideFunction
from mail.core.mailbox import Mailbox, MailboxClosed
from mail.core.message import MAILMessage
from mail.core.runtime_ports import HostLink, TaskLog
from mail.core.tasks import RUNTIME_EVENTS
from mail.utils.background import hold

logger = logging.getLogger("mail.runtime")

RunMode = Literal["continuous", "manual"]


class LoopHost(TaskLog, Protocol):
    """What the loops use of the runtime: its mailbox, its loop settings, and dispatch."""

    mailbox: Mailbox
    max_steps: int | None
    action_override: ActionOverrideFunction | None
    mode: RunMode

    @property
    def default_max_steps(self) -> int | None: ...
    @property
    def journal(self) -> Any: ...
    @property
    def _shutdown(self) -> bool: ...

    def _dispatch(self, message: MAILMessage) -> None: ...
    def _open_waiters(self) -> list[asyncio.Future[MAILMessage]]: ...


class LoopRunner(HostLink[LoopHost]):
    """run_continuous and the temporary loop (run_task's); at most one loop serves the mailbox."""

    def __init__(self, host: LoopHost) -> None:
        self._link(host)
        self.loop_running = False
        self.stop_serving = False
        self.continuous = False
        self.ephemeral_task: asyncio.Task[None] | None = None
        self.ephemeral_stopping: asyncio.Task[None] | None = None
        self.ephemeral_saved: tuple[int | None, ActionOverrideFunction | None] = (None, None)
        self.ephemeral_users = 0
        self.background: set[asyncio.Task[Any]] = set()  # tasks the loops started, held

    async def run_continuous(
        self, max_steps: int | None, action_override: ActionOverrideFunction | None, mode: RunMode
    ) -> None:
        """Serve the mailbox until shutdown. From its first step, calls queue on this loop; a
        temporary loop already serving calls keeps them, and this one takes over when it ends."""
        rt = self.host
        if self.continuous:
            raise RuntimeError("the runtime loop is already running")
        self.continuous = True
        served = False
        try:
            while (temporary := self.ephemeral_stopping or self.ephemeral_task) is not None:
                if rt._shutdown:  # the temporary loop ends, though a user may stay (a stream)
                    return
                await asyncio.wait({temporary})  # until its last user has restored the settings
            served = True
            saved = (rt.max_steps, rt.action_override, rt.mode)
            rt.max_steps = max_steps
            rt.action_override = action_override
            rt.mode = mode
            try:
                await self._serve()
            finally:  # a later temporary loop must not run in this loop's (e.g. manual) mode
                rt.max_steps, rt.action_override, rt.mode = saved
        finally:
            self.continuous = False
            if not served and not rt._shutdown:
                self._serve_stranded_calls()

    def _serve_stranded_calls(self) -> None:
        """Calls that queued behind this loop's claim, which ended before it served (cancelled
        during the hand-over), get a temporary loop until they have their answers."""
        rt = self.host
        waiting = rt._open_waiters()
        if not waiting:
            return

        async def serve() -> None:
            async with self.ephemeral_loop(rt.default_max_steps):
                await asyncio.wait(waiting)

        hold(self.background, asyncio.create_task(serve(), name="mail-runtime-stranded-calls"))

    def ephemeral_loop(
        self,
        max_steps: int | None = None,
        action_override: ActionOverrideFunction | None = None,
        *,
        rt: LoopHost | None = None,
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Serve the mailbox for the duration of the block unless a continuous loop runs.

        Concurrent users share one temporary loop; the last one out stops it and restores
        the loop settings (max_steps, action_override) that were in place before. The
        runtime passes itself as `rt`, so a block not yet entered holds it.

        A class, not an ``asynccontextmanager`` generator: a stream a caller stops reading
        (``break``) is closed by asyncio's ``shutdown_asyncgens`` together with every other
        open async generator, in no set order, and a generator-based block closed before the
        stream around it made the stream's exit fail ("generator didn't stop after athrow()").
        """
        return _EphemeralLoop(self, max_steps, action_override, rt if rt is not None else self.host)

    async def _leave_ephemeral(self, rt: LoopHost) -> None:
        """A user of the temporary loop leaves; the last one out stops it."""
        self.ephemeral_users -= 1
        if self.ephemeral_users == 0 and self.ephemeral_task is not None:
            serve, self.ephemeral_task = self.ephemeral_task, None
            self.ephemeral_stopping = serve
            self.stop_serving = True
            rt.mailbox.put_wakeup()
            try:
                await asyncio.shield(serve)
            finally:
                self.ephemeral_stopping = None
                rt.max_steps, rt.action_override = self.ephemeral_saved

    async def _serve(self) -> None:
        rt = self.host
        if self.loop_running:
            raise RuntimeError("the runtime loop is already running")
        self.loop_running = True
        self.stop_serving = False
        if rt.journal is not None:
            rt.journal.loop_started()  # tasks restored from a store continue
        try:
            while not self.stop_serving and not rt._shutdown:
                try:
                    message = await rt.mailbox.get()
                except MailboxClosed:
                    break
                if message is None:  # a wake-up without a message
                    continue
                try:
                    rt._dispatch(message)
                except Exception as exc:  # noqa: BLE001 - the loop must survive
                    logger.exception("error while dispatching a message")
                    rt._emit(message["message"]["task_id"], "run_loop_error", f"{exc}")
        except asyncio.CancelledError:
            rt._emit(RUNTIME_EVENTS, "run_loop_cancelled", "run loop cancelled")
            raise
        finally:
            self.loop_running = False

    def dispatch_pending(self, rt: LoopHost | None = None) -> None:
        """Dispatch what is queued now, on behalf of a loop that is blocked on an empty queue.

        Called when an agent turn ends. Without it the loop would wake only after every other
        ready callback (e.g. a whole wave of turns finishing at once) had run; dispatching
        here starts the next agent sooner. Order is the mailbox's, as the loop would take it.
        `rt`: the runtime, when it calls (one weak reference less).
        """
        rt = rt or self.host
        if not (self.loop_running and rt.mailbox.consumer_waiting) or rt._shutdown:
            return
        while not self.stop_serving:
            message = rt.mailbox.get_nowait()
            if message is None:
                return
            try:
                rt._dispatch(message)
            except Exception as exc:  # noqa: BLE001 - same policy as the loop
                logger.exception("error while dispatching a message")
                rt._emit(message["message"]["task_id"], "run_loop_error", f"{exc}")


class _EphemeralLoop:
    """`LoopRunner.ephemeral_loop`'s block: one user of the shared temporary loop."""

    def __init__(
        self,
        runner: LoopRunner,
        max_steps: int | None,
        action_override: ActionOverrideFunction | None,
        rt: LoopHost,
    ) -> None:
        self.runner = runner
        self.max_steps = max_steps
        self.action_override = action_override
        self.rt = rt
        self.counted = False

    async def __aenter__(self) -> None:
        runner, rt = self.runner, self.rt
        while not runner.continuous and runner.ephemeral_stopping is not None:
            await asyncio.wait({runner.ephemeral_stopping})
        if runner.continuous:  # checked again after waiting: a continuous loop may have begun
            return
        runner.ephemeral_users += 1
        self.counted = True
        if runner.ephemeral_task is None:
            runner.ephemeral_saved = (rt.max_steps, rt.action_override)
            rt.max_steps = self.max_steps
            rt.action_override = self.action_override
            runner.ephemeral_task = asyncio.create_task(runner._serve())
            try:
                await asyncio.sleep(0)
            except BaseException:  # a cancellation here must still count this user out
                self.counted = False
                await runner._leave_ephemeral(rt)
                raise

    async def __aexit__(self, *exc_info: object) -> None:
        if self.counted:
            self.counted = False
            await self.runner._leave_ephemeral(self.rt)
