"""Writes that must outlive an outage, for the stores that commit as they go."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mail.store.records import StoreUnavailableError
from mail.store.writer import WriteBehindBuffer

Op = TypeVar("Op")


@dataclass(slots=True)
class _Queued(Generic[Op]):
    op: Op
    done: asyncio.Future[None] | None  # None: nobody waits for this one


class RetryingWrites(Generic[Op]):
    """Ops applied in order by one background worker, retried while the database fails.

    `apply(ops)` applies a batch (one transaction where the database has them) and raises
    to have it retried; `is_transient(exc)` tells an outage from an invalid write.
    """

    def __init__(
        self,
        apply: Callable[[list[Op]], Awaitable[None]],
        *,
        is_transient: Callable[[BaseException], bool],
        name: str,
        close_timeout: float = 10.0,
        max_pending: int = 100_000,
    ) -> None:
        self._apply_ops = apply
        self._is_transient = is_transient
        self.close_timeout = close_timeout
        # The futures callers wait on -> whether the write must commit (see write_now).
        self._waiting: dict[asyncio.Future[None], bool] = {}
        # No batching delay: a caller waits for its commit, as it did for a direct write.
        self._buffer: WriteBehindBuffer[_Queued[Op]] = WriteBehindBuffer(
            self._apply,
            is_transient=is_transient,
            max_batch=100,
            max_delay=0.0,
            max_pending=max_pending,
            name=name,
        )

    @property
    def name(self) -> str:
        return self._buffer.name

    def start(self) -> None:
        self._buffer.start()

    @property
    def running(self) -> bool:
        return self._buffer.running

    # -- writing -------------------------------------------------------------------------
    async def write(self, op: Op) -> None:
        """Returns once `op` is committed, or at once (op queued) while the database fails."""
        if not self._buffer.running:
            raise StoreUnavailableError(f"{self.name} is closed")
        if self.is_degraded():
            await self._buffer.submit(_Queued(op, None))
            return
        await self._submit_and_wait(op, must_commit=False)

    async def write_now(self, op: Op) -> None:
        """Returns once `op` is committed; refused while the database fails."""
        if not self._buffer.running:
            raise StoreUnavailableError(f"{self.name} is closed")
        if self.is_degraded():
            raise StoreUnavailableError(
                f"storage is failing ({self.last_error}); nothing was stored, try again later"
            )
        await self._submit_and_wait(op, must_commit=True)

    async def _submit_and_wait(self, op: Op, *, must_commit: bool) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[done] = must_commit
        try:
            await self._buffer.submit(_Queued(op, done))
            await done
        finally:
            self._waiting.pop(done, None)

    async def flush(self, timeout: float | None = None) -> bool:
        return await self._buffer.flush(timeout)

    async def close(self, timeout: float | None = None) -> int:
        """Write what is queued (at most `timeout` seconds), then stop; returns how many
        writes were given up (the buffer logs them with the last error)."""
        lost = await self._buffer.close(self.close_timeout if timeout is None else timeout)
        for done in list(self._waiting):
            if not done.done():
                done.set_exception(StoreUnavailableError(f"{self.name} closed before the write"))
        self._waiting.clear()
        return lost

    # -- the buffer's worker -------------------------------------------------------------
    async def _apply(self, batch: Sequence[_Queued[Op]]) -> None:
        try:
            await self._apply_ops([item.op for item in batch])
        except Exception as exc:
            if self._is_transient(exc):
                self._release_waiters()
            elif len(batch) == 1:  # the buffer isolated the invalid write: tell its caller
                self._finish(batch[0], exc)
            raise
        for item in batch:
            self._finish(item, None)

    def _release_waiters(self) -> None:
        """The database is failing: callers of `write` go on, their writes stay queued."""
        for done, must_commit in list(self._waiting.items()):
            if not done.done() and not must_commit:
                done.set_result(None)

    def _finish(self, item: _Queued[Op], exc: BaseException | None) -> None:
        done = item.done
        if done is None or done.done():
            return
        if exc is None:
            done.set_result(None)
        elif done in self._waiting:
            done.set_exception(exc)

    # -- health --------------------------------------------------------------------------
    def is_degraded(self) -> bool:
        return self._buffer.outage_since is not None

    @property
    def last_error(self) -> str | None:
        return self._buffer.last_error

    @property
    def pending_writes(self) -> int:
        return self._buffer.pending

    def status(self) -> dict[str, Any]:
        since = self._buffer.outage_since
        return {
            "degraded": since is not None,
            "failing_for": None if since is None else round(time.monotonic() - since, 1),
            "last_error": self._buffer.last_error,
            "pending_writes": self._buffer.pending,
            "failed_attempts": self._buffer.failed_attempts,
            "dropped_writes": self._buffer.dropped,
        }
