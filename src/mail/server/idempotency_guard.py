"""The state behind ``Idempotency-Key``: the key store, the keyed requests under way here.

One :class:`IdempotencyGuard` per server (``ServerState.idempotency``): it knows the key
store (``mail.store.idempotency``), which keyed requests this process is working on, and how
many live keys each caller holds. A :class:`Ticket` is one keyed request: its take (the key
committed before the work starts), its outcome, or its release when it was refused before
doing anything. The routes' side is ``mail.server.idempotency``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import HTTPException
from starlette.responses import Response

from mail.server.auth import Caller
from mail.server.idempotency_streams import Leaving, stream_ended
from mail.server.idempotency_wire import key_reused
from mail.store.base import InstanceKey
from mail.store.idempotency import IdempotencyStore, KeyRecord

logger = logging.getLogger("mail.server.idempotency")

# Seconds a caller at the key bound is told to wait (the oldest keys expire meanwhile).
KEY_LIMIT_RETRY_AFTER = 60
# At the key bound, this share of it (at least one key) of the caller's oldest finished keys
# is forgotten at once: one store statement per that many keyed requests, not per request.
EVICT_FRACTION = 0.1
# Seconds an outcome recorded after its answer waits for others to be written with it.
OUTCOME_DELAY = 0.05
# Seconds between two sweeps of expired keys (one per server, started by a take).
SWEEP_INTERVAL = 600.0


class IdempotencyGuard:
    """One per server: the key store, the requests under way here, the per-caller bound."""

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        swarm_name: str,
        ttl: float,
        max_keys: int,
        max_length: int,
        takeover_after: float = 60.0,
    ) -> None:
        self.store = store
        # Seconds after which an unfinished key of another process is taken over
        # (`mail.server.idempotency.default_resolve`).
        self.takeover_after = takeover_after
        self.swarm_name = swarm_name
        self.ttl = ttl
        self.max_keys = max_keys
        self.max_length = max_length
        # Who took a key: host and process, and a random tag, since two front ends may share
        # both (containers on the host's network each run `mail` as process 1), and a key one
        # of them holds must not look like the other's own (`default_resolve`).
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        # The owners' tickets of the keyed requests under way here, by (role, id, key).
        self._pending: dict[tuple[str, str, str], Ticket] = {}
        # Each caller's bookkeeping here (its scope, its count of live keys), by (role, id):
        # one lookup per keyed request.
        self._callers: dict[tuple[str, str], CallerKeys] = {}
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        self._background: set[asyncio.Task[Any]] = set()
        # Outcomes recorded after their answer (`Ticket.finish(lazy=True)`), and their writer.
        self._outcomes: list[tuple[Ticket, tuple[InstanceKey, str, int, str | None, bytes]]] = []
        self._writer: asyncio.Task[None] | None = None
        # Under a byte bound ([server.store] max_stored_bytes_per_caller): called with the
        # caller's scope, the task a key names and the bytes of its outcome once stored (the
        # store measures them with the task, and removes them with it).
        self.book_outcome: Callable[[InstanceKey, str, int], None] | None = None

    def booked(self, ticket: Ticket, body: bytes) -> None:
        """The outcome `body` of `ticket`'s key is stored: into its task's books."""
        book, subject = self.book_outcome, ticket.subject
        if book is not None and subject is not None and body:
            book(ticket.scope, subject, len(body))

    def caller_keys(self, role: str, ident: str) -> CallerKeys:
        keys = self._callers.get((role, ident))
        if keys is None:
            keys = self._callers[(role, ident)] = CallerKeys(
                InstanceKey(self.swarm_name, role, ident)
            )
        return keys

    def scope(self, caller: Caller) -> InstanceKey:
        return self.caller_keys(caller.role, caller.id).scope

    def open(
        self, caller: Caller, key: str, fingerprint: str, *, with_work: bool = False
    ) -> Ticket:
        """The ticket of a request with `key`: a duplicate of one under way in this process,
        or the key's owner here (whether the store already has the key, its take tells).
        `with_work`: its route takes the key with its work (`Ticket.with_work`)."""
        role = caller.role
        ident = caller.id
        slot = (role, ident, key)
        first = self._pending.get(slot)
        keys = self._callers.get((role, ident)) or self.caller_keys(role, ident)
        if first is not None:
            if first.fingerprint != fingerprint:
                raise key_reused()
            return Ticket(self, keys, key, fingerprint, first, None, caller, with_work)
        ticket = self._pending[slot] = Ticket(
            self, keys, key, fingerprint, None, slot, caller, with_work
        )
        return ticket

    def reserve(self, keys: CallerKeys) -> bool:
        """Count one more key of the caller now, when it is known to hold fewer than
        `max_keys` (no store read: the usual case of every keyed request); False when its
        count is unknown or at the bound (then `admit`). Give it back with `unreserve`."""
        if not self.max_keys:
            return True
        count = keys.count
        if count is None or count >= self.max_keys:
            return False
        keys.count = count + 1
        keys.reserved += 1
        return True

    def unreserve(self, keys: CallerKeys, *, stored: bool) -> None:
        """A reserved slot's take is over: its key `stored` (it stays counted) or not."""
        if not self.max_keys:
            return
        keys.reserved -= 1
        if not stored:
            self.released(keys)
        elif keys.landed is not None:
            keys.landed += 1

    async def admit(self, keys: CallerKeys, key: str, now: float) -> None:
        """Reserve room for one more key of the caller (`reserve`): at `max_keys` live keys,
        its oldest finished ones are forgotten (a batch of them, `EVICT_FRACTION` of the
        bound); 429 when none of them is finished (every request is still under way, or died
        without an outcome). One recount per caller at a time; the slots reserved by takes
        not yet stored are added to the store's count."""
        if not self.max_keys:
            return
        if keys.counting is None:
            keys.counting = asyncio.Lock()
        # Waiting for the lock or holding it: a sweep keeps `keys` meanwhile.
        keys.waiting += 1
        try:
            await self._recount(keys, key, now)
        finally:
            keys.waiting -= 1

    async def _recount(self, keys: CallerKeys, key: str, now: float) -> None:
        """`admit`'s recount, under the caller's lock."""
        assert keys.counting is not None
        scope = keys.scope
        async with keys.counting:
            if self.reserve(keys):  # counted by the recount that ran meanwhile
                return
            keys.landed = 0
            try:
                if keys.count is not None:
                    await self.store.purge(now, scope)
                count = await self.store.count(scope, now)
                if count >= self.max_keys and await self.store.get(scope, key, now) is None:
                    # (A repeat of a held key adds none: its own record must not be evicted.)
                    await self.flush_outcomes()
                    batch = count - self.max_keys + max(1, int(self.max_keys * EVICT_FRACTION))
                    count -= await self.store.evict_finished(scope, batch)
            finally:
                # (Counted twice when the read saw them too: a recount of more than there
                # is errs toward the bound, and the next recount corrects it.)
                landed, keys.landed = keys.landed or 0, None
            keys.count = count + landed + keys.reserved
            if not self.reserve(keys):
                raise HTTPException(
                    429,
                    f"you hold {keys.count} idempotency keys whose requests are still under "
                    "way or ended without an outcome, the most one caller may hold "
                    "([server.settings] max_idempotency_keys_per_caller = "
                    f"{self.max_keys}); they expire {self.ttl:g}s after their request; retry "
                    "later, or send this request without an Idempotency-Key",
                    headers={"Retry-After": str(self.limit_retry_after())},
                )

    def limit_retry_after(self) -> int:
        """Seconds a caller at the key bound is told to wait: never longer than its keys
        live (with `idempotency_key_ttl = 5`, 60 s would send it away for nothing)."""
        return max(1, min(KEY_LIMIT_RETRY_AFTER, math.ceil(self.ttl)))

    def released(self, keys: CallerKeys) -> None:
        if keys.count:
            keys.count -= 1

    def maybe_sweep(self) -> None:
        """Every `SWEEP_INTERVAL` (checked by each take): expired keys swept from the store,
        every caller counted again when next needed (expired keys drop out)."""
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        for owner, keys in list(self._callers.items()):
            keys.count = None
            # A caller with nothing under way here is forgotten (callers come and go).
            if not keys.reserved and keys.landed is None and not keys.waiting:
                del self._callers[owner]
        self.spawn(self.store.purge(time.time()), "sweeping expired idempotency keys")

    def record_later(
        self, ticket: Ticket, status: int, content_type: str | None, body: bytes
    ) -> None:
        """Queue an outcome; the queue is written in one go `OUTCOME_DELAY` seconds after its
        first entry, then the tickets leave their "under way here" entries."""
        self._outcomes.append((ticket, (ticket.scope, ticket.key, status, content_type, body)))
        (ticket.first or ticket).answered = (status, content_type, body)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_outcomes())

    async def _write_outcomes(self) -> None:
        while self._outcomes:
            await asyncio.sleep(OUTCOME_DELAY)
            await self.flush_outcomes()

    async def flush_outcomes(self) -> None:
        """Write the queued outcomes now (also before evicting: they are finished keys)."""
        batch, self._outcomes = self._outcomes, []
        if not batch:
            return
        try:
            await self.store.finish_many([outcome for _, outcome in batch])
            for ticket, outcome in batch:
                self.booked(ticket, outcome[4])
        except Exception:  # noqa: BLE001 - unfinished keys are resolved from their tasks
            logger.warning("recording %d idempotency outcomes failed", len(batch), exc_info=True)
        finally:
            for ticket, _ in batch:
                ticket.leave()

    def spawn(self, work: Awaitable[Any], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:  # noqa: BLE001 - background housekeeping: logged, retried later
                logger.warning("%s failed", what, exc_info=True)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.store.close()


class CallerKeys:
    """One caller's keys as this process counts them (`IdempotencyGuard.caller_keys`)."""

    __slots__ = ("count", "counting", "landed", "reserved", "scope", "waiting")

    def __init__(self, scope: InstanceKey) -> None:
        self.scope = scope
        # Live keys as last counted, plus those taken since; None: to be counted (`admit`).
        self.count: int | None = None
        # Slots reserved (counted above) by takes not yet stored: a recount from the store
        # adds them. Reserving is synchronous, so concurrent new keys cannot pass the bound.
        self.reserved = 0
        # While a recount runs: the keys stored (their slot given back) since it began, as
        # the count it reads may predate them (a take queued between its flush and its read).
        self.landed: int | None = None
        self.counting: asyncio.Lock | None = None  # one recount at a time
        # Takes waiting for that lock or holding it: a sweep keeps this object meanwhile
        # (`asyncio.Lock.locked()` is False between a release and the next waiter's turn).
        self.waiting = 0


class Ticket:
    """One keyed request: what was found for its key, and its take / finish."""

    __slots__ = (
        "_context",
        "_subject",
        "answered",
        "answered_by_task",
        "caller",
        "carried",
        "fingerprint",
        "first",
        "guard",
        "in_flight",
        "key",
        "keys",
        "mark",
        "owner",
        "record",
        "scope",
        "slot",
        "taken",
        "takeover",
        "with_work",
    )

    def __init__(
        self,
        guard: IdempotencyGuard,
        keys: CallerKeys,
        key: str,
        fingerprint: str,
        first: Ticket | None,
        slot: tuple[str, str, str] | None,
        caller: Caller | None = None,
        with_work: bool = False,
    ) -> None:
        self.guard = guard
        self.keys = keys
        self.scope = keys.scope
        self.key = key
        self.fingerprint = fingerprint
        # A duplicate's: the ticket of the request with this key under way in this process
        # (what it started and answered is kept there); None: this one is that request.
        self.first = first
        self.in_flight = first is not None
        # Its "under way here" entry, (role, id, key), while it holds it (`owner`).
        self.slot = slot
        self.owner = slot is not None
        # What the request started (e.g. its task id) and what its route needs to find that
        # work again, once taken or found in the store (read through `subject`, `context`).
        self._subject: str | None = None
        self._context: Mapping[str, Any] | None = None
        # (status, content type, body) once the request answered and until it is written
        # (`record_later`): what a duplicate arriving meanwhile gets (`outcome`).
        self.answered: tuple[int, str | None, bytes] | None = None
        # The live record found in the store (a duplicate of a finished or orphaned request).
        self.record: KeyRecord | None = None
        # Set when this request redoes the work of a first attempt that died after its take.
        self.takeover = False
        self.taken = False
        # The work is the task store's writes, made right after the take (`take_with_work`).
        self.with_work = with_work
        # The answer is the one its task keeps (set by the route): no outcome is stored; a
        # repeat rebuilds the same answer from the task (the resolver), as after a crash.
        self.answered_by_task = False
        # Taken at once (`take`'s usual case): its row went into the task store's buffer
        # ahead of the task's writes (what the store's `carried` says, known without asking
        # it), as the store's write `mark` (`written` tells when it is committed).
        self.carried = False
        self.mark = 0
        # The caller as the guard resolved it (`mail.server.idempotency`), for the route.
        self.caller = caller

    def found(self, record: KeyRecord) -> None:
        """The store holds the key already (`KeyHeld`): what its first request started."""
        self.record = record
        shared = self.first or self
        shared._subject, shared._context = record.subject, dict(record.context)

    @property
    def subject(self) -> str | None:
        """What the first request started (e.g. its task id), as far as is known."""
        return (self.first or self)._subject

    @property
    def context(self) -> Mapping[str, Any]:
        """What the take recorded with the key: read-only (a new task's is shared,
        `mail.store.idempotency.FRESH_TASK_CONTEXTS`)."""
        context = (self.first or self)._context
        return {} if context is None else context

    @property
    def outcome(self) -> KeyRecord | None:
        """The answer of the key's request under way here, not yet written, as a record
        (built only for a duplicate)."""
        shared = self.first or self
        if shared.answered is None:
            return None
        status, content_type, body = shared.answered
        return KeyRecord(
            shared.fingerprint, 0.0, 0.0, status=status, content_type=content_type, body=body
        )

    def take_now(self, subject: str | None, context: dict[str, Any]) -> bool:
        """`take`'s usual case (its ticket `with_work`, not a takeover), whole and with no
        await: its caller holds fewer than `max_keys` keys as counted, and the store takes
        the key at once (a new key of ``POST /message`` on SQLite: `take_fields_now`).
        False: nothing was done (then `take`)."""
        guard = self.guard
        keys = self.keys
        limit = guard.max_keys
        count = keys.count
        if limit and (count is None or count >= limit):
            return False
        now = time.time()
        mark = guard.store.take_fields_now(
            self.scope, self.key, self.fingerprint, subject, context, guard.holder, now,
            now + guard.ttl,
        )  # fmt: skip
        if not mark:
            return False
        if limit:  # counted (`reserve`, then `unreserve(stored=True)`, with nothing between)
            keys.count = count + 1  # type: ignore[operator]
            if keys.landed is not None:
                keys.landed += 1
        self.taken = self.carried = True
        self.mark = mark
        self._subject, self._context = subject, context
        if time.monotonic() >= guard._next_sweep:
            guard.maybe_sweep()
        return True

    async def take(self, subject: str | None = None, context: dict[str, Any] | None = None) -> None:
        """Commit the key (with what the work is) before the work starts; 409/422/429 when
        it cannot be taken (then nothing may start)."""
        if context is None:
            context = {}  # (the caller's own, fresh)
        if self.with_work and not self.takeover and self.take_now(subject, context):
            return
        now = time.time()
        guard = self.guard
        record = KeyRecord(
            self.fingerprint,
            now,
            now + guard.ttl,
            subject=subject,
            context=context,
            holder=guard.holder,
        )
        # The caller's bookkeeping as the guard holds it now (a sweep since this ticket was
        # opened forgot the one it had: that one is counted no more).
        keys = self.keys = guard.caller_keys(self.scope.caller_role, self.scope.caller_id)
        counted = not self.takeover  # a slot of the bound reserved (before any await)
        if counted and not guard.reserve(keys):
            try:
                await guard.admit(keys, self.key, now)
            except HTTPException:
                # At the bound: a repeat of a request whose key is held still gets its answer.
                earlier = await guard.store.get(self.scope, self.key, now)
                if earlier is None:
                    raise
                if earlier.fingerprint != self.fingerprint:
                    raise key_reused() from None
                raise KeyHeld(earlier) from None
        store = guard.store
        take = store.take_with_work if self.with_work else store.take
        # A takeover replaces the dead attempt's record it found, and no other: a retry that
        # took it over meanwhile in another process (a front end) keeps it.
        over = self.record.created_at if self.takeover and self.record is not None else None
        try:
            held = await take(self.scope, self.key, record, replace=self.takeover, over=over)
        except BaseException:
            if counted:
                guard.unreserve(keys, stored=False)
            raise
        if counted:
            guard.unreserve(keys, stored=held is None)
        if held is not None:  # an earlier request has the key: the route must not go on
            if held.fingerprint != self.fingerprint:
                raise key_reused()
            raise KeyHeld(held)
        self.taken = True
        self._subject, self._context = subject, record.context
        guard.maybe_sweep()

    async def finish(self, response: Response, *, lazy: bool = False) -> Response:
        """Store the outcome of a taken key (before the answer leaves) and return the answer.

        A streamed answer is not stored (a duplicate attaches to its task instead, see the
        route's resolver); the key stays "under way here" until the stream ends, and with
        `lazy` its outcome is then `STREAMED_OUTCOME` (no body: the key counts as answered,
        so it is among those forgotten early at the caller's bound). With `lazy`
        (a route whose resolver rebuilds the outcome from the work's own records, which are
        stored before the answer leaves), the outcome is written with others a moment later,
        and the key stays "under way here" until then; with `answered_by_task` too, it is not
        written at all: a repeat rebuilds the same answer from the task, and the store counts
        the key as finished once its task is (`evict_finished`).
        """
        if not self.taken:
            self.leave()
            return response
        if not hasattr(response, "body"):
            if getattr(response, "on_end", False) is None:  # an `EventStreamResponse`
                response.on_end = functools.partial(stream_ended, response, self)  # type: ignore[attr-defined]
                return response
            return Leaving(response, self, record=lazy)
        if lazy and self.answered_by_task:
            self.leave()  # its key and its task are committed: they are the outcome
            return response
        if lazy:
            self.guard.record_later(
                self,
                response.status_code,
                response.headers.get("content-type"),
                bytes(response.body),
            )
            return response
        body = bytes(response.body)
        try:
            await self.guard.store.finish(
                self.scope,
                self.key,
                response.status_code,
                response.headers.get("content-type"),
                body,
            )
            self.guard.booked(self, body)
        finally:
            self.leave()
        return response

    async def store_outcome(self, response: Response) -> None:
        """Record `response` as the outcome of a key whose first request died (a resolver
        that rebuilt the answer from the work's own records)."""
        body = bytes(response.body)
        await self.guard.store.finish(
            self.scope, self.key, response.status_code, response.headers.get("content-type"), body
        )
        self.guard.booked(self, body)

    async def release(self) -> None:
        """Forget the key this request took: it was refused before it did anything."""
        if self.taken:
            self.taken = self.carried = False
            self.mark = 0
            self.guard.released(self.keys)
            await self.guard.store.release(self.scope, self.key)

    async def abandon(self, *, release: bool) -> None:
        """The route raised. With `release` the key is forgotten (nothing was done), before
        the error answer leaves: a retry right after it may run the request."""
        try:
            if release:
                await self.release()
        except Exception:  # noqa: BLE001 - the key stays taken: a retry is told to wait
            logger.warning("releasing an idempotency key failed", exc_info=True)
        finally:
            self.leave()

    def leave(self) -> None:
        """This request no longer holds the key's "under way here" entry (idempotent)."""
        if self.taken:
            self.guard.store.let_go(self.scope, self.key)
        if self.owner:
            self.owner = False
            pending = self.guard._pending
            if pending.get(self.slot) is self:  # type: ignore[arg-type]
                del pending[self.slot]  # type: ignore[arg-type]


class KeyHeld(Exception):
    """Raised by `Ticket.take`: the store already holds the key for this same request (a
    retry, or its first attempt still under way). The route stops; the guard answers."""

    def __init__(self, record: KeyRecord) -> None:
        super().__init__("idempotency key already taken")
        self.record = record
