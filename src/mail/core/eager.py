"""Turns that start in their caller's step (`spawn_turn`): a submitted message's first turn.

An asyncio task runs its first step on a later pass of the event loop, after every callback
that was ready before it. When many callers submit at once (200 tasks posted together, a burst
of requests), every submission and every dispatch runs before the first turn, so the first
model call starts only once the last caller has been served: all of that sits on the path of
every task (with 200 callers, 5-6 ms before the first of 200 model calls of 50 ms).

The turn a caller's submission starts (`TaskWaiters` asks the loop to dispatch at once) runs
its first step in the caller's step instead, up to its first wait (the model call), and goes
on as an asyncio task of its own from there, as Python 3.12's eager tasks do. So each caller's
model call starts before the next caller is served. The first step runs in a copy of the
caller's context, which the task then keeps: context variables set by the turn do not leak
into the caller, and the turn's task is the current task already (``asyncio.timeout`` in the
first step, the durable journal's running turns and ``cancelling()`` see the turn's task, not
the caller's).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from asyncio.tasks import _enter_task, _leave_task
from collections.abc import Coroutine, Generator
from typing import Any, Protocol

# Python 3.12 starts tasks eagerly itself (asyncio.Task(..., eager_start=True)).
_NATIVE = sys.version_info >= (3, 12)


class EagerHost(Protocol):
    """What `spawn_turn` uses of the runtime."""

    eager_turns: bool

    @property
    def journal(self) -> Any: ...


def spawn_turn(rt: EagerHost, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """`coro` as an asyncio task; when `rt.eager_turns` is set (and then cleared), its first
    step runs now, before this returns."""
    if not rt.eager_turns:
        return asyncio.create_task(coro)
    rt.eager_turns = False
    return start_eagerly(coro)


def start_eagerly(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """An asyncio task of `coro` whose first step runs now, in a copy of the caller's context,
    with the task as the current task (what `asyncio.timeout`, the durable journal and
    ``cancelling()`` see), as Python 3.12's ``eager_start`` does."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    if _NATIVE:
        return asyncio.Task(coro, loop=loop, context=context, eager_start=True)  # type: ignore[call-arg]
    started = _Started(coro)
    task = loop.create_task(started, context=context)
    caller = asyncio.current_task(loop)
    if caller is not None:
        _leave_task(loop, caller)
    _enter_task(loop, task)
    try:
        context.run(started.first_step)
    finally:
        _leave_task(loop, task)
        if caller is not None:
            _enter_task(loop, caller)
    return task


class _Started(Coroutine[Any, Any, Any]):
    """A coroutine whose first step ran before its task's: the task's first step hands the
    task what that step waits on (or its result, or its error); later steps go to `coro`.

    What the first step waits on is taken as a task's step takes it (its
    ``_asyncio_future_blocking`` cleared: a future still marked refuses the next ``await`` of
    it, "await wasn't used with future", e.g. a second turn started eagerly awaiting the same
    future) and handed to the task marked again, as it was yielded (`blocking`)."""

    __slots__ = ("blocking", "coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro
        self.first: tuple[str, Any] | None = None
        self.blocking: bool | None = None

    def first_step(self) -> None:
        try:
            waits = self.coro.send(None)
        except StopIteration as stop:
            self.first = ("returned", stop.value)
        except (KeyboardInterrupt, SystemExit) as exc:
            self.first = ("raised", exc)
            raise
        except BaseException as exc:  # noqa: BLE001 - the task raises it, as its own step would
            self.first = ("raised", exc)
        else:
            self.first = ("waits", waits)
            self.blocking = getattr(waits, "_asyncio_future_blocking", None)
            if self.blocking:
                waits._asyncio_future_blocking = False  # taken, as a task's step takes it

    def _waits(self, what: Any) -> Any:
        if self.blocking:
            what._asyncio_future_blocking = True  # as the first step yielded it
        return what

    def send(self, value: Any) -> Any:
        first, self.first = self.first, None
        if first is None:
            return self.coro.send(value)
        how, what = first
        if how == "waits":
            return self._waits(what)
        if how == "returned":
            raise StopIteration(what)
        raise what

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        first, self.first = self.first, None
        if first is not None:
            how, what = first
            # Cancelled before its task ran: an eager task that ended in its first step is
            # done already (its result or error stands; `coro` cannot be resumed); one that
            # waits has what it waits on cancelled and ends when that ends (a task it awaits
            # ends after its own clean-up), as a task's cancel() does.
            if how == "returned":
                raise StopIteration(what)
            if how == "raised":
                raise what
            if (
                isinstance(typ, asyncio.CancelledError)
                and self.blocking
                and isinstance(what, asyncio.Future)
                and what.cancel(msg=typ.args[0] if typ.args else None)
            ):
                return self._waits(what)
        if val is None and tb is None:
            return self.coro.throw(typ)
        return self.coro.throw(typ, val, tb)

    def close(self) -> None:
        self.coro.close()

    def __getattr__(self, name: str) -> Any:
        # cr_code, cr_frame, __qualname__...: the task's repr, get_stack() and debug mode
        # show the turn's coroutine, not this wrapper.
        if name in _Started.__slots__:
            raise AttributeError(name)
        return getattr(self.coro, name)

    def __await__(self) -> Generator[Any, Any, Any]:
        return self.coro.__await__()
