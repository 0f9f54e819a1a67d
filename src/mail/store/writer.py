"""Write-behind batching: callers enqueue and return; one background task writes.

Guarantees:
- order: items are written in submission order (one consumer, FIFO, a batch is retried
  as a whole and never reordered);
- durability of acknowledged items: a transient failure (database down, connection
  reset, timeout) keeps the batch and retries it with capped exponential backoff until it
  succeeds or the buffer is closed;
- isolation of poison items: a non-transient failure splits the batch and retries item by
  item, so only the item the database rejects is dropped (and counted, and logged).

Riders (`put_rider`, with `merge_riders`): small items that go with the next batch cut, ahead
of the queue's items, all of a batch's riders merged into one item (one pass through the
store's batch steps for them all, where a queued item each costs one per item). A rider is
committed no later than anything submitted after it (a batch cut after it takes it, or an
earlier one did), which is what a row that must never be missing beside later writes needs;
it may be written before items submitted ahead of it, so a rider is for a row no earlier
pending write touches. `flush()` waits for the riders accepted before it as for the queue.

A store whose commit is synchronous (SQLite, on the loop's thread) may give `write_now` and
`alone`: a `flush()` that finds the worker holding no batch and the queue `alone` (only one
caller's work in it: nobody else's writes to share a commit with) writes the queue itself,
at once, with no task switch to the worker and back (a lone caller's answer waits for
exactly that). With other work queued the worker writes, one round of the loop later, so
that the requests finishing in that round share its commit (group commit). When
`write_now` declines (returns False or raises), the batch it was given is handed to the
worker, which writes it with the retries and the poison isolation above.

The buffer knows nothing about SQL: it is given an `apply(batch)` coroutine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")

logger = logging.getLogger("mail.store.writer")

# While an outage lasts, repeat the warning at most this often (seconds).
_OUTAGE_REMINDER_INTERVAL = 30.0


def _expire(waiter: asyncio.Future[None], expired: list[bool]) -> None:
    """A `flush()`'s timeout: its wait ends (False)."""
    if not waiter.done():
        expired.append(True)
        waiter.cancel()


class WriteBehindBuffer(Generic[T]):
    def __init__(
        self,
        apply: Callable[[Sequence[T]], Awaitable[None]],
        *,
        is_transient: Callable[[BaseException], bool],
        max_batch: int = 200,
        max_delay: float = 0.05,
        retry_initial: float = 0.2,
        retry_max: float = 5.0,
        max_pending: int = 100_000,
        name: str = "store",
        prepare: Callable[[list[T], deque[T]], tuple[int, list[T]]] | None = None,
        split: Callable[[T], list[T]] | None = None,
        write_now: Callable[[list[T]], bool] | None = None,
        alone: Callable[[deque[T]], bool] | None = None,
        merge_riders: Callable[[list[Any]], T] | None = None,
        on_drop: Callable[[T], None] | None = None,
    ) -> None:
        if max_batch < 1 or max_pending < 1:
            raise ValueError("max_batch and max_pending must be positive")
        self._apply = apply
        # Called with each batch as it is cut and the queue it comes from: (how many items
        # of the queue the batch takes, the items to write). Runs once per batch, before
        # its first attempt (a retry writes what it returned).
        self._prepare = prepare
        # An item standing for several rows, as those rows (several items) or [] when it is
        # one: a rejected item is retried row by row, so only the bad row is dropped.
        self._split = split
        self._on_drop = on_drop  # told of each item dropped as poison (not retried)
        # `flush()`'s synchronous write (see the module's docstring): True when the batch
        # is committed, False (or an exception) when the worker must write it.
        self._write_now = write_now if alone is not None else None
        self._alone = alone  # the queue holds one caller's work only (see the docstring)
        self._holding = False  # the worker has cut a batch and not yet counted it written
        # A batch `write_now` declined, cut and prepared (with how many queue items and
        # riders it took): the worker's next batch.
        self._handed: tuple[int, int, list[T]] | None = None
        # Riders (the module's docstring): waiting for the next cut, and counts for
        # `rider_written` and `flush`. `merge_riders` makes a batch's riders one item.
        self._merge_riders = merge_riders
        self._riders: list[Any] = []
        self.riders_submitted = 0
        self.riders_done = 0  # (read by `idempotency_sqlite_buffered` on every keyed answer)
        self._is_transient = is_transient
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.max_pending = max_pending
        self.name = name

        self._queue: deque[T] = deque()
        # Items ever accepted: a mark for `written` (a plain attribute: read on every keyed
        # request's take, `idempotency_sqlite_buffered`).
        self.submitted = 0
        self._done = 0  # items written (or dropped as poison)
        self._changed = asyncio.Condition()  # room in the queue (submit's backpressure)
        self._room_waiters = 0
        # flush() callers: (the item and rider counts they wait for, their future), in
        # submission order (targets never decrease), resolved by the worker as batches land:
        # one wake-up per caller, where a Condition woke every caller on every batch to check
        # its predicate.
        self._flushes: deque[tuple[int, int, asyncio.Future[None]]] = deque()
        self._urgent = asyncio.Event()  # stop waiting for a fuller batch
        self._has_items = asyncio.Event()
        self._full_logged = float("-inf")  # when reaching `max_pending` was last logged
        self._worker: asyncio.Task[None] | None = None
        self._flush_waiters = 0

        self.failed_attempts = 0
        self.dropped = 0
        self.last_error: str | None = None
        self.outage_since: float | None = None  # monotonic time of the first failure
        # Monotonic time the worker started writing its current batch (None while idle).
        self.writing_since: float | None = None

    # -- public API ----------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self.submitted - self._done + self.riders_submitted - self.riders_done

    def stalled_for(self) -> float:
        """Seconds the batch being written has waited without failing (0 while idle or
        failing): the database neither takes it nor refuses it, e.g. while another process
        holds its lock or the disk does not answer."""
        since = self.writing_since
        if since is None or self.outage_since is not None:
            return 0.0
        return time.monotonic() - since

    @property
    def running(self) -> bool:
        return self._worker is not None and not self._worker.done()

    def start(self) -> None:
        if self.running:
            return
        self._worker = asyncio.create_task(self._run(), name=f"{self.name}-writer")

    @property
    def full(self) -> bool:
        """`max_pending` items are waiting: `submit` would wait, `put_nowait` refuses."""
        if len(self._queue) < self.max_pending:
            return False
        now = time.monotonic()
        if now - self._full_logged >= _OUTAGE_REMINDER_INTERVAL:  # not once per write
            self._full_logged = now
            logger.warning(
                "%s: %d writes wait for the database, the most it holds (max_pending); new "
                "writes wait for room (last error: %s)",
                self.name,
                len(self._queue),
                self.last_error,
            )
        return True

    async def submit(self, item: T) -> None:
        """Accept an item. Waits only if `max_pending` items are already waiting."""
        if self.full:
            # Backpressure during a long outage, instead of growing without bound.
            self._room_waiters += 1
            try:
                async with self._changed:
                    await self._changed.wait_for(lambda: not self.full)
            finally:
                self._room_waiters -= 1
        self.put_nowait(item)

    def put_nowait(self, item: T) -> None:
        """Accept an item now; the caller checked `full` (raises if it is)."""
        if not self.try_put(item):
            raise RuntimeError(f"{self.name}: {self.max_pending} writes already waiting")

    def written(self, mark: int) -> bool:
        """Every item accepted up to `mark` (a `submitted` value) is written."""
        return self._done >= mark

    def put_rider(self, rider: Any) -> int:
        """Accept a rider (the module's docstring): its mark for `rider_written`, or 0
        (nothing taken) while `max_pending` items wait."""
        riders = self._riders
        if not riders:  # the first of the next batch's riders
            if len(self._queue) >= self.max_pending or self._merge_riders is None:
                return 0
            self._has_items.set()
        riders.append(rider)
        self.riders_submitted += 1
        if self._flush_waiters:
            self._urgent.set()
        return self.riders_submitted

    def rider_written(self, mark: int) -> bool:
        """The rider `put_rider` answered `mark` for (and every one before it) is written."""
        return self.riders_done >= mark

    def _cut_riders(self, batch: list[T]) -> tuple[int, list[T]]:
        """The riders waiting, merged into one item ahead of `batch`: (how many, the batch)."""
        riders = self._riders
        if not riders:
            return 0, batch
        self._riders = []
        assert self._merge_riders is not None
        return len(riders), [self._merge_riders(riders), *batch]

    def try_put(self, item: T) -> bool:
        """Accept an item now, or return False (nothing taken) while `full`.

        The store's hot path (one call per write of a request, some 20 a request): one
        length check, and the events set only when they are not set already.
        """
        queue = self._queue
        waiting = len(queue)
        if waiting >= self.max_pending:
            return False
        queue.append(item)
        self.submitted += 1
        if not waiting:
            self._has_items.set()
        if self._flush_waiters or waiting + 1 >= self.max_batch:
            self._urgent.set()
        return True

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted before this call is written (riders included)."""
        target = self.submitted
        riders = self.riders_submitted
        if self._done >= target and self.riders_done >= riders:
            return True
        if not self.running:
            raise RuntimeError(f"{self.name} writer is not running; cannot flush")
        if self._write_now is not None and self._flush_now():
            return True
        self._flush_waiters += 1
        self._urgent.set()
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._flushes.append((target, riders, waiter))
        # A timer that cancels the waiter (`_wake_flushes` skips it) rather than
        # `asyncio.timeout` around the wait: one handle, no context, on every answer's path.
        expired: list[bool] = []
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter, expired)
        # Cancel requests its task had before the wait (one caught by a caller cleaning up
        # after a cancellation): not the caller's cancellation of this wait.
        task = asyncio.current_task()
        before = 0 if task is None else task.cancelling()
        try:
            await waiter
        except asyncio.CancelledError:
            # The timer's cancellation ends the wait; the caller's own (its task is being
            # cancelled, also when both came at once) goes on.
            if expired and (task is None or task.cancelling() <= before):
                return False
            raise
        finally:
            self._flush_waiters -= 1
            if timer is not None:
                timer.cancel()
        return self._done >= target and self.riders_done >= riders

    async def close(self, timeout: float | None = 10.0) -> int:
        """Flush for at most `timeout` seconds, then stop. Returns the number of unwritten items."""
        if self.running:
            flushed = await self.flush(timeout)
            if not flushed:
                logger.error(
                    "%s: giving up on %d unwritten item(s) at shutdown (last error: %s)",
                    self.name,
                    self.pending,
                    self.last_error,
                )
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        return self.pending

    def _flush_now(self) -> bool:
        """`flush()`'s synchronous path: cut the queue and `write_now` it (True: written).

        Only while the worker holds no batch (so batches stay in order), no batch waits for
        it, nothing waits for room and no outage is under way; when the whole queue fits in
        one batch (everything submitted before the flush is then written) and is `alone`."""
        queue = self._queue
        if (
            self._holding
            or self._handed is not None
            or self._room_waiters
            or self.outage_since is not None
            or len(queue) > self.max_batch
        ):
            return False
        assert self._write_now is not None and self._alone is not None
        if not self._alone(queue):
            return False
        batch = list(queue)
        taken = len(batch)
        if self._prepare is not None:
            taken, batch = self._prepare(batch, queue)
        riders, batch = self._cut_riders(batch)
        try:
            written = self._write_now(batch)
        except Exception as exc:  # noqa: BLE001 - the worker retries it or isolates the poison
            logger.debug("%s: writing at flush failed (%s); the writer retries", self.name, exc)
            written = False
        if not written:
            self._handed = (taken, riders, batch)
            self._urgent.set()
            return False
        self._taken(taken, riders)
        return True

    def _taken(self, taken: int, riders: int = 0) -> None:
        """`taken` items at the queue's head and `riders` riders are written: count them,
        wake their flushes."""
        queue = self._queue
        if len(queue) == taken:  # nothing came meanwhile (the queue only grows)
            queue.clear()
        else:
            for _ in range(taken):
                queue.popleft()
        self._done += taken
        self.riders_done += riders
        if not queue and not self._riders:
            self._has_items.clear()
        self._wake_flushes()

    # -- worker ----------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must not leave flush() callers hanging silently
            logger.exception("%s: writer stopped unexpectedly", self.name)
        finally:
            self._wake_flushes(stopped=True)
            async with self._changed:
                self._changed.notify_all()

    def _wake_flushes(self, stopped: bool = False) -> None:
        """Resolve the flush() callers whose items are written (all of them once stopped)."""
        flushes = self._flushes
        while flushes and (
            stopped or (flushes[0][0] <= self._done and flushes[0][1] <= self.riders_done)
        ):
            _, _, waiter = flushes.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _loop(self) -> None:
        while True:
            await self._has_items.wait()
            if len(self._queue) < self.max_batch and not self._flush_waiters and self.max_delay > 0:
                # Give concurrent writers a moment to fill the batch.
                self._urgent.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.max_delay):
                        await self._urgent.wait()
            queue = self._queue
            if self._handed is not None:  # cut by a flush that could not write it
                (taken, riders, batch), self._handed = self._handed, None
            elif not queue and not self._riders:  # a flush wrote it meanwhile (`_flush_now`)
                self._has_items.clear()
                continue
            else:
                batch = list(itertools.islice(queue, self.max_batch))
                taken = len(batch)
                if self._prepare is not None and batch:
                    taken, batch = self._prepare(batch, queue)
                riders, batch = self._cut_riders(batch)
            self._holding = True
            self.writing_since = time.monotonic()
            try:
                await self._write(batch)
            finally:
                self._holding = False
                self.writing_since = None
            self._taken(taken, riders)
            if self._room_waiters:
                async with self._changed:
                    self._changed.notify_all()

    async def _write(self, batch: list[T]) -> None:
        delay = self.retry_initial
        last_reminder = 0.0
        while True:
            try:
                await self._apply(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if not self._is_transient(exc):
                    await self._isolate_poison(batch, exc)
                    return
                self.failed_attempts += 1
                now = time.monotonic()
                if self.outage_since is None:
                    self.outage_since = now
                    last_reminder = now
                    logger.warning(
                        "%s: database write failed (%s); %d write(s) pending, retrying in %.1fs",
                        self.name,
                        self.last_error,
                        self.pending,
                        delay,
                    )
                elif now - last_reminder >= _OUTAGE_REMINDER_INTERVAL:
                    last_reminder = now
                    logger.warning(
                        "%s: database still unavailable after %.0fs (%s); %d write(s) pending",
                        self.name,
                        now - self.outage_since,
                        self.last_error,
                        self.pending,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            if self.outage_since is not None:
                logger.warning(
                    "%s: database writes recovered after %.1fs; %d write(s) still pending",
                    self.name,
                    time.monotonic() - self.outage_since,
                    self.pending - len(batch),
                )
                self.outage_since = None
            return

    async def _isolate_poison(self, batch: list[T], exc: BaseException) -> None:
        if len(batch) == 1 and self._split is not None:
            parts = self._split(batch[0])
            if len(parts) > 1:
                batch = parts
        if len(batch) == 1:
            self.dropped += 1
            logger.error(
                "%s: dropping a write the database rejected: %s: %s; item: %.500r",
                self.name,
                type(exc).__name__,
                exc,
                batch[0],
            )
            if self._on_drop is not None:
                self._on_drop(batch[0])
            return
        for item in batch:
            await self._write([item])
