"""The state behind ``Idempotency-Key``: the key store, the keyed requests under way here.

One :class:`IdempotencyGuard` per server (``ServerState.idempotency``): it knows the key
store (``mail.store.idempotency``), which keyed requests this process is working on, and how
many live keys each caller holds. A :class:`Ticket` is one keyed request: its take (the key
committed before the work starts), its outcome, or its release when it was refused before
doing anything. The routes' side is ``mail.server.idempotency``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mail.server.auth import Caller
from mail.server.idempotency_wire import key_reused
from mail.store.base import InstanceKey
from mail.store.idempotency import IdempotencyStore, KeyRecord

logger = logging.getLogger("mail.server.idempotency")

# Seconds a caller at the key bound is told to wait (the oldest keys expire meanwhile).
KEY_LIMIT_RETRY_AFTER = 60
# At the key bound, this share of it (at least one key) of the caller's oldest finished keys
# is forgotten at once: one store statement per that many keyed requests, not per request.
EVICT_FRACTION = 0.01
# Seconds an outcome recorded after its answer waits for others to be written with it.
OUTCOME_DELAY = 0.05
# Seconds between two sweeps of expired keys (one per server, started by a take).
SWEEP_INTERVAL = 600.0


@dataclass
class _Pending:
    """A request with a key under way in this process (before and after its take)."""

    fingerprint: str
    subject: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    # The outcome, once the request answered and until it is written (`record_later`):
    # what a duplicate arriving meanwhile gets.
    outcome: KeyRecord | None = None


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
    ) -> None:
        self.store = store
        self.swarm_name = swarm_name
        self.ttl = ttl
        self.max_keys = max_keys
        self.max_length = max_length
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self._pending: dict[tuple[str, str, str], _Pending] = {}  # (role, id, key)
        # Live keys per caller as last counted (+ keys taken since): checked at each take.
        self._counts: dict[tuple[str, str], int] = {}  # (role, id)
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        self._background: set[asyncio.Task[Any]] = set()
        # Outcomes recorded after their answer (`Ticket.finish(lazy=True)`), and their writer.
        self._outcomes: list[tuple[Ticket, tuple[InstanceKey, str, int, str | None, bytes]]] = []
        self._writer: asyncio.Task[None] | None = None

    def scope(self, caller: Caller) -> InstanceKey:
        return InstanceKey(self.swarm_name, caller.role, caller.id)

    def open(self, caller: Caller, key: str, fingerprint: str) -> Ticket:
        """The ticket of a request with `key`: a duplicate of one under way in this process,
        or the key's owner here (whether the store already has the key, its take tells)."""
        scope = self.scope(caller)
        slot = (caller.role, caller.id, key)
        pending = self._pending.get(slot)
        if pending is not None:
            if pending.fingerprint != fingerprint:
                raise key_reused()
            return Ticket(self, scope, key, fingerprint, in_flight=True, pending=pending)
        pending = self._pending[slot] = _Pending(fingerprint)
        return Ticket(self, scope, key, fingerprint, pending=pending, owner=True)

    def has_room(self, scope: InstanceKey) -> bool:
        """The caller is known to hold fewer than `max_keys` live keys (no store read: the
        usual case of every keyed request)."""
        if not self.max_keys:
            return True
        count = self._counts.get((scope.caller_role, scope.caller_id))
        return count is not None and count < self.max_keys

    async def admit(self, scope: InstanceKey, key: str, now: float) -> None:
        """Room for one more key of the caller: at `max_keys` live keys, its oldest finished
        ones are forgotten (a batch of them, `EVICT_FRACTION` of the bound); 429 when none of
        them is finished (every request is still under way, or died without an outcome)."""
        if not self.max_keys:
            return
        owner = (scope.caller_role, scope.caller_id)
        count = self._counts.get(owner)
        if count is None or count >= self.max_keys:
            if count is not None:
                await self.store.purge(now, scope)
            count = await self.store.count(scope, now)
            if count >= self.max_keys and await self.store.get(scope, key, now) is None:
                # (A repeat of a held key adds none: its own record must not be evicted.)
                await self.flush_outcomes()
                batch = count - self.max_keys + max(1, int(self.max_keys * EVICT_FRACTION))
                count -= await self.store.evict_finished(scope, batch)
            self._counts[owner] = count
        if count >= self.max_keys:
            raise HTTPException(
                429,
                f"you hold {count} idempotency keys whose requests are still under way or "
                "ended without an outcome, the most one caller may hold ([server.settings] "
                f"max_idempotency_keys_per_caller = {self.max_keys}); they expire "
                f"{self.ttl:g}s after their request; retry later, or send this request "
                "without an Idempotency-Key",
                headers={"Retry-After": str(KEY_LIMIT_RETRY_AFTER)},
            )

    def taken(self, scope: InstanceKey) -> None:
        owner = (scope.caller_role, scope.caller_id)
        if owner in self._counts:
            self._counts[owner] += 1
        self._maybe_sweep()

    def released(self, scope: InstanceKey) -> None:
        owner = (scope.caller_role, scope.caller_id)
        if self._counts.get(owner):
            self._counts[owner] -= 1

    def _maybe_sweep(self) -> None:
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        self._counts.clear()  # counted again when next needed (expired keys drop out)
        self.spawn(self.store.purge(time.time()), "sweeping expired idempotency keys")

    def record_later(self, ticket: Ticket, response: Response) -> None:
        """Queue an outcome; the queue is written in one go `OUTCOME_DELAY` seconds after its
        first entry, then the tickets leave their "under way here" entries."""
        outcome = (
            ticket.scope,
            ticket.key,
            response.status_code,
            response.headers.get("content-type"),
            bytes(response.body),
        )
        self._outcomes.append((ticket, outcome))
        ticket.pending.outcome = KeyRecord(
            ticket.fingerprint,
            0.0,
            0.0,
            status=outcome[2],
            content_type=outcome[3],
            body=outcome[4],
        )
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


class Ticket:
    """One keyed request: what was found for its key, and its take / finish."""

    def __init__(
        self,
        guard: IdempotencyGuard,
        scope: InstanceKey,
        key: str,
        fingerprint: str,
        *,
        pending: _Pending,
        in_flight: bool = False,
        owner: bool = False,
    ) -> None:
        self.guard = guard
        self.scope = scope
        self.key = key
        self.fingerprint = fingerprint
        self.pending = pending
        # True: another request with this key is under way in this process.
        self.in_flight = in_flight
        # The live record found in the store (a duplicate of a finished or orphaned request).
        self.record: KeyRecord | None = None
        self.owner = owner  # holds the "under way here" entry of the key
        # Set when this request redoes the work of a first attempt that died after its take.
        self.takeover = False
        self.taken = False

    def found(self, record: KeyRecord) -> None:
        """The store holds the key already (`KeyHeld`): what its first request started."""
        self.record = record
        self.pending.subject, self.pending.context = record.subject, dict(record.context)

    @property
    def subject(self) -> str | None:
        """What the first request started (e.g. its task id), as far as is known."""
        return self.pending.subject

    @property
    def context(self) -> dict[str, Any]:
        return self.pending.context

    async def take(self, subject: str | None = None, context: dict[str, Any] | None = None) -> None:
        """Commit the key (with what the work is) before the work starts; 409/422/429 when
        it cannot be taken (then nothing may start)."""
        now = time.time()
        record = KeyRecord(
            self.fingerprint,
            now,
            now + self.guard.ttl,
            subject=subject,
            context=dict(context or {}),
            holder=self.guard.holder,
        )
        if not self.takeover and not self.guard.has_room(self.scope):
            try:
                await self.guard.admit(self.scope, self.key, now)
            except HTTPException:
                # At the bound: a repeat of a request whose key is held still gets its answer.
                earlier = await self.guard.store.get(self.scope, self.key, now)
                if earlier is None:
                    raise
                if earlier.fingerprint != self.fingerprint:
                    raise key_reused() from None
                raise KeyHeld(earlier) from None
        held = await self.guard.store.take(self.scope, self.key, record, replace=self.takeover)
        if held is not None:  # an earlier request has the key: the route must not go on
            if held.fingerprint != self.fingerprint:
                raise key_reused()
            raise KeyHeld(held)
        self.taken = True
        self.pending.subject, self.pending.context = subject, record.context
        if not self.takeover:
            self.guard.taken(self.scope)

    async def finish(self, response: Response, *, lazy: bool = False) -> Response:
        """Store the outcome of a taken key (before the answer leaves) and return the answer.

        A streamed answer is not stored (a duplicate attaches to its task instead, see the
        route's resolver); the key stays "under way here" until the stream ends. With `lazy`
        (a route whose resolver rebuilds the outcome from the work's own records, which are
        stored before the answer leaves), the outcome is written with others a moment later,
        and the key stays "under way here" until then.
        """
        if not self.taken:
            self.leave()
            return response
        if not hasattr(response, "body"):
            return _Leaving(response, self)
        if lazy:
            self.guard.record_later(self, response)
            return response
        try:
            await self.guard.store.finish(
                self.scope,
                self.key,
                response.status_code,
                response.headers.get("content-type"),
                bytes(response.body),
            )
        finally:
            self.leave()
        return response

    async def store_outcome(self, response: Response) -> None:
        """Record `response` as the outcome of a key whose first request died (a resolver
        that rebuilt the answer from the work's own records)."""
        await self.guard.store.finish(
            self.scope,
            self.key,
            response.status_code,
            response.headers.get("content-type"),
            bytes(response.body),
        )

    async def release(self) -> None:
        """Forget the key this request took: it was refused before it did anything."""
        if self.taken:
            self.taken = False
            self.guard.released(self.scope)
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
        if self.owner:
            self.owner = False
            slot = (self.scope.caller_role, self.scope.caller_id, self.key)
            if self.guard._pending.get(slot) is self.pending:
                del self.guard._pending[slot]


class KeyHeld(Exception):
    """Raised by `Ticket.take`: the store already holds the key for this same request (a
    retry, or its first attempt still under way). The route stops; the guard answers."""

    def __init__(self, record: KeyRecord) -> None:
        super().__init__("idempotency key already taken")
        self.record = record


class _Leaving(Response):
    """A streamed answer that gives its key's "under way here" entry back when it ends."""

    def __init__(self, inner: Response, ticket: Ticket) -> None:
        self._inner = inner
        self._ticket = ticket
        self.status_code = inner.status_code
        self.background = None
        self.raw_headers = inner.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._inner(scope, receive, send)
        finally:
            self._ticket.leave()


async def start_guard(config: Any, task_store: Any) -> IdempotencyGuard:
    """The server's guard over the task store's database (SQLite or PostgreSQL), or memory."""
    store = await _open_store(task_store)
    settings = config.settings
    return IdempotencyGuard(
        store,
        swarm_name=config.swarm.name,
        ttl=settings.idempotency_key_ttl,
        max_keys=settings.max_idempotency_keys_per_caller,
        max_length=settings.max_idempotency_key_length,
    )


async def _open_store(task_store: Any) -> IdempotencyStore:
    backend = getattr(task_store, "backend", "")
    if backend == "sqlite":
        from mail.store.idempotency_sqlite import SqliteIdempotencyStore

        lite = SqliteIdempotencyStore(task_store.path)  # the same file (and writer thread)
        await lite.start()
        return lite
    if backend == "postgres":
        from mail.store import database_url_from_env
        from mail.store.idempotency_postgres import PostgresIdempotencyStore

        url = database_url_from_env()
        if url:
            pg = PostgresIdempotencyStore(url)
            await pg.start()
            return pg
    from mail.store.idempotency import MemoryIdempotencyStore

    return MemoryIdempotencyStore()
