"""``Idempotency-Key`` on the routes that start or change work: a retry never runs it twice.

The convention is the IETF's (draft-ietf-httpapi-idempotency-key-header): the client sends
``Idempotency-Key: "<unique value>"`` (a Structured Field string; a bare token is accepted
too) and sends it again, unchanged, with the same request when it retries. Keys belong to
the caller (role and id): another caller's key of the same value is another key.

- first request with a key: the work is done; the key record (with what the work started,
  e.g. a task id) is committed *before* the work starts, and the outcome (status, body)
  once it answered;
- the same key and the same request again (method, path and body; the body compared as
  canonical JSON): the stored outcome, with ``Idempotent-Replayed: true``, and nothing is
  done again;
- the same key while the first request is still under way: 409 with ``Retry-After`` (a
  route may answer otherwise: ``POST /message`` with ``stream: true`` attaches to the task's
  event stream);
- the same key with another request: 422; a malformed key (or two of them): 400; more live
  keys than ``max_idempotency_keys_per_caller``: 429. A request without the header runs as
  before; no route requires one.

This module holds all of it above the key store (``mail.store.idempotency``): the wire
format (the header, the fingerprint, the answers), the :class:`IdempotencyGuard` (one per
server: the requests under way here, each caller's count of keys), the :class:`Ticket` of
one keyed request (its take, outcome or release), the :func:`idempotent` decorator, and
what a request that runs a task records with its key (:meth:`Ticket.take_message`).

A route opts in with one decorator::

    @router.post("/swarms")
    @idempotent()
    async def register_swarm(request: Request, caller: Caller = Depends(caller_admin)): ...

The default mode takes the key before the route runs and forgets it again when the route
raises (nothing was done: a retry may run it). ``deferred=True`` is for routes that start
long work: the route calls ``current_ticket(request).take(subject, context)`` itself, right
before the work starts, and a ``resolve`` function tells what a duplicate gets whose first
request's process died after the take (``mail.server.message_replay`` for ``POST /message``,
and its ``task_resolver`` for ``POST /responses`` and ``POST /interswarm/message``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import re
import secrets
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import HTTPException, Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from mail.server.auth import Caller, caller_admin_or_user, server_state
from mail.server.bodies import prefer_async as _prefers_async
from mail.server.errors import BadRequest
from mail.server.jsonio import PARSED_BODY, dumps, loads
from mail.store.base import STREAMED_OUTCOME, InstanceKey
from mail.store.idempotency import (
    FRESH_TASK_CONTEXTS,
    IdempotencyStore,
    KeyRecord,
    open_key_store,
)

logger = logging.getLogger("mail.server.idempotency")

HEADER = b"idempotency-key"
REPLAYED_HEADER = "Idempotent-Replayed"
DOCS = "docs/api-http.md#idempotency-keys"
# Seconds a duplicate of a request still under way is told to wait before asking again.
IN_PROGRESS_RETRY_AFTER = 1
# Seconds a caller at the key bound is told to wait (the oldest keys expire meanwhile).
KEY_LIMIT_RETRY_AFTER = 60
# At the key bound, this share of it (at least one key) of the caller's oldest finished keys
# is forgotten at once: one store statement per that many keyed requests, not per request.
EVICT_FRACTION = 0.1
# Seconds an outcome recorded after its answer waits for others to be written with it.
OUTCOME_DELAY = 0.05
# Seconds between two sweeps of expired keys (one per server, started by a take).
SWEEP_INTERVAL = 600.0
# Seconds after which a key another process took and never finished is taken over by a
# retry (routes without a resolver of their own: their work is short); the default of
# `[server.settings] idempotency_takeover_after`.
TAKEOVER_AFTER = 60.0
# Where a keyed request's ticket is kept for the route (`current_ticket`).
_SCOPE_KEY = "mail.idempotency"

Resolver = Callable[[Request, Caller, "Ticket"], Awaitable[Response | None]]

_orjson: Any
try:  # not a declared dependency: used when the environment has it (as mail.server.jsonio)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

# ------------------------------------------------------------------------------ the wire


def key_of(fields: list[bytes], max_length: int) -> str | None:
    """The key of the ``Idempotency-Key`` header `fields`, or None without one; 400 for a
    malformed one.

    An ``sf-string`` (``"..."``, printable ASCII, ``\\"`` and ``\\\\`` escaped) as the draft
    says, or the same characters unquoted (what curl users type): at most ``max_length``
    characters, not empty, one header field.
    """
    if not fields:
        return None
    if len(fields) > 1:
        raise BadRequest(f"send one Idempotency-Key header, not {len(fields)} (see {DOCS})")
    raw = fields[0].decode("latin-1").strip()  # (latin-1: as Starlette decodes headers)
    key = _sf_string(raw) if raw.startswith('"') else raw
    if not key or not (key.isascii() and key.isprintable()):
        raise BadRequest(
            "Idempotency-Key must be a quoted string of printable ASCII characters, such as "
            f'"8e03978e-40d5-43e8-bc93-6894a57f9324" (see {DOCS})'
        )
    if max_length and len(key) > max_length:
        raise BadRequest(
            f"Idempotency-Key is {len(key)} characters long; the most this server accepts is "
            f"{max_length} ([server.settings] max_idempotency_key_length)"
        )
    return key


_SF_STRING = re.compile(r'"((?:[^"\\]|\\["\\])*)"')


def _sf_string(raw: str) -> str | None:
    """The value of an RFC 8941 string (``"a \\" b"``), or None when it is not one."""
    match = _SF_STRING.fullmatch(raw)
    return None if match is None else re.sub(r"\\(.)", r"\1", match.group(1))


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two requests "the same": method, path and the body as canonical JSON
    (keys sorted, no spaces), or the raw bytes of a body that is not JSON."""
    return fingerprint_and_value(method, path, body)[0]


def fingerprint_and_value(
    method: str, path: str, body: bytes, background: bool = False
) -> tuple[str, Any]:
    """`fingerprint`, and the body's JSON value it was made from (None when the body is not
    JSON): the route need not parse the body again (`PARSED_BODY`). `background`: the
    request asked to be answered at once (``Prefer: respond-async``), which is the same
    request as one whose body says ``"background": true``, and not the same as one that
    waits for its answer."""
    value: Any = None
    canonical = body
    if body:  # (a body of spaces is not JSON: hashed as it is, as an empty one)
        try:
            value = loads(body)
            hashed = value
            if background and type(value) is dict and value.get("background") is not True:
                hashed = {**value, "background": True}
            canonical = (
                _orjson.dumps(hashed, option=_orjson.OPT_SORT_KEYS)
                if _orjson is not None
                else json.dumps(
                    hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=False
                ).encode()
            )
        except (ValueError, TypeError, RecursionError):
            value, canonical = None, body
    data = f"{method.upper()} {path}\n".encode() + canonical
    return hashlib.sha256(data).hexdigest(), value


def in_progress(detail: str | None = None, **extra: Any) -> Response:
    """409 + Retry-After: the first request with this key is still under way."""
    body = {
        "detail": detail
        or "a request with this Idempotency-Key is still being processed; retry after "
        f"{IN_PROGRESS_RETRY_AFTER}s to get its outcome",
        **extra,
    }
    return Response(
        dumps(body),
        status_code=409,
        media_type="application/json",
        headers={"Retry-After": str(IN_PROGRESS_RETRY_AFTER)},
    )


def key_reused() -> HTTPException:
    return HTTPException(
        422,
        "this Idempotency-Key was already used for a different request (another method, "
        "path or body); send a new key with a new request",
    )


def replay(record: KeyRecord) -> Response:
    """The stored outcome of the first request, as it answered (an accepted background
    message's `Location` is its body's `status_url`)."""
    headers = {REPLAYED_HEADER: "true"}
    if record.status == 202 and record.body:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            location = loads(record.body).get("status_url")
            if isinstance(location, str):
                headers["Location"] = location
    return Response(
        record.body or b"",
        status_code=record.status or 200,
        media_type=record.content_type,
        headers=headers,
    )


# ----------------------------------------------------------------------------- the guard


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
        # the count it reads may predate them.
        self.landed: int | None = None
        self.counting: asyncio.Lock | None = None  # one recount at a time
        # Takes waiting for that lock or holding it: a sweep keeps this object meanwhile.
        self.waiting = 0


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
        takeover_after: float = TAKEOVER_AFTER,
    ) -> None:
        self.store = store
        # Seconds after which an unfinished key of another process is taken over
        # (`default_resolve`).
        self.takeover_after = takeover_after
        self.swarm_name = swarm_name
        self.ttl = ttl
        self.max_keys = max_keys
        self.max_length = max_length
        # Who took a key: host, process and a random tag (two front ends in containers may
        # share both), so a key another process holds never looks like this one's own.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        # The owners' tickets of the keyed requests under way here, by (role, id, key).
        self._pending: dict[tuple[str, str, str], Ticket] = {}
        self._callers: dict[tuple[str, str], CallerKeys] = {}
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        self._background: set[asyncio.Task[Any]] = set()
        # Outcomes recorded after their answer (`Ticket.finish(lazy=True)`), and their writer.
        self._outcomes: list[tuple[Ticket, tuple[InstanceKey, str, int, str | None, bytes]]] = []
        self._writer: asyncio.Task[None] | None = None
        # Under a byte bound ([server.store] max_stored_bytes_per_caller): called with the
        # caller's scope, the task a key names and the bytes of its outcome once stored.
        self.book_outcome: Callable[[InstanceKey, str, int], None] | None = None

    def booked(self, ticket: Ticket, body: bytes) -> None:
        if self.book_outcome is not None and ticket.subject:
            self.book_outcome(ticket.scope, ticket.subject, len(body))

    def caller_keys(self, role: str, ident: str) -> CallerKeys:
        keys = self._callers.get((role, ident))
        if keys is None:
            keys = self._callers[(role, ident)] = CallerKeys(
                InstanceKey(self.swarm_name, role, ident)
            )
        return keys

    def scope(self, caller: Caller) -> InstanceKey:
        return self.caller_keys(caller.role, caller.id).scope

    def open(self, caller: Caller, key: str, fingerprint: str) -> Ticket:
        """The ticket of a request with `key`: a duplicate of one under way in this process,
        or the key's owner here (whether the store already has the key, its take tells)."""
        slot = (caller.role, caller.id, key)
        keys = self.caller_keys(caller.role, caller.id)
        first = self._pending.get(slot)
        if first is not None:
            if first.fingerprint != fingerprint:
                raise key_reused()
            return Ticket(self, keys, key, fingerprint, first, None, caller)
        ticket = self._pending[slot] = Ticket(self, keys, key, fingerprint, None, slot, caller)
        return ticket

    def reserve(self, keys: CallerKeys) -> bool:
        """Count one more key of the caller now, when it is known to hold fewer than
        `max_keys` (no store read: the usual case); False when its count is unknown or at
        the bound (then `admit`). Give it back with `unreserve`."""
        if not self.max_keys:
            return True
        if keys.count is None or keys.count >= self.max_keys:
            return False
        keys.count += 1
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

    def released(self, keys: CallerKeys) -> None:
        if keys.count:
            keys.count -= 1

    async def admit(self, keys: CallerKeys, key: str, now: float) -> None:
        """Reserve room for one more key of the caller, counted from the store: at
        `max_keys` live keys, its oldest finished ones are forgotten (`EVICT_FRACTION` of
        the bound at once); 429 when none of them is finished. One recount per caller at a
        time; the slots reserved by takes not yet stored are added to the store's count."""
        if not self.max_keys:
            return
        if keys.counting is None:
            keys.counting = asyncio.Lock()
        keys.waiting += 1  # (a sweep keeps `keys` meanwhile)
        try:
            async with keys.counting:
                if self.reserve(keys):  # counted by the recount that ran meanwhile
                    return
                await self._recount(keys, key, now)
                if self.reserve(keys):
                    return
        finally:
            keys.waiting -= 1
        raise HTTPException(
            429,
            f"you hold {keys.count} idempotency keys whose requests are still under "
            "way or ended without an outcome, the most one caller may hold "
            "([server.settings] max_idempotency_keys_per_caller = "
            f"{self.max_keys}); they expire {self.ttl:g}s after their request; retry "
            "later, or send this request without an Idempotency-Key",
            headers={"Retry-After": str(self.limit_retry_after())},
        )

    async def _recount(self, keys: CallerKeys, key: str, now: float) -> None:
        scope = keys.scope
        keys.landed = 0
        try:
            if keys.count is not None:
                await self.store.purge(now, scope)
            count = await self.store.count(scope, now)
            # Keys stored meanwhile and takes not yet stored count too (the caller's count
            # below adds them): room is made when the sum reaches the bound, or a count just
            # under it would refuse the caller with nothing evicted.
            held = count + (keys.landed or 0) + keys.reserved
            if held >= self.max_keys and await self.store.get(scope, key, now) is None:
                # (A repeat of a held key adds none: its own record must not be evicted.)
                await self.flush_outcomes()
                batch = held - self.max_keys + max(1, int(self.max_keys * EVICT_FRACTION))
                who = (scope.caller_role, scope.caller_id)
                busy = frozenset(k for (r, i, k) in self._pending if (r, i) == who)
                count -= await self.store.evict_finished(scope, batch, busy)
        finally:
            # (Counted twice when the read saw them too: errs toward the bound, and the next
            # recount corrects it.)
            landed, keys.landed = keys.landed or 0, None
        keys.count = count + landed + keys.reserved

    def limit_retry_after(self) -> int:
        """Seconds a caller at the key bound is told to wait: never longer than its keys
        live (with `idempotency_key_ttl = 5`, 60 s would send it away for nothing)."""
        return max(1, min(KEY_LIMIT_RETRY_AFTER, math.ceil(self.ttl)))

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


async def start_guard(config: Any, task_store: Any) -> IdempotencyGuard:
    """The server's guard over the task store's database (SQLite or PostgreSQL), or memory."""
    settings = config.settings
    return IdempotencyGuard(
        await open_key_store(task_store),
        swarm_name=config.swarm.name,
        ttl=settings.idempotency_key_ttl,
        max_keys=settings.max_idempotency_keys_per_caller,
        max_length=settings.max_idempotency_key_length,
        takeover_after=settings.idempotency_takeover_after,
    )


# ---------------------------------------------------------------------------- the ticket


class KeyHeld(Exception):
    """Raised by `Ticket.take`: the store already holds the key for this same request (a
    retry, or its first attempt still under way). The route stops; the guard answers."""

    def __init__(self, record: KeyRecord) -> None:
        super().__init__("idempotency key already taken")
        self.record = record


class Ticket:
    """One keyed request: what was found for its key, and its take / finish."""

    def __init__(
        self,
        guard: IdempotencyGuard,
        keys: CallerKeys,
        key: str,
        fingerprint: str,
        first: Ticket | None,
        slot: tuple[str, str, str] | None,
        caller: Caller | None = None,
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
        # The answer is the one its task keeps: no outcome is stored; a repeat rebuilds the
        # same answer from the task (the resolver), as after a crash.
        self.answered_by_task = False
        # The caller as the guard resolved it, for the route.
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
        `FRESH_TASK_CONTEXTS`)."""
        context = (self.first or self)._context
        return {} if context is None else context

    @property
    def outcome(self) -> KeyRecord | None:
        """The answer of the key's request under way here, not yet written, as a record."""
        shared = self.first or self
        if shared.answered is None:
            return None
        status, content_type, body = shared.answered
        return KeyRecord(
            shared.fingerprint, 0.0, 0.0, status=status, content_type=content_type, body=body
        )

    async def take(self, subject: str | None = None, context: dict[str, Any] | None = None) -> None:
        """Commit the key (with what the work is) before the work starts; 409/422/429 when
        it cannot be taken (then nothing may start)."""
        guard = self.guard
        now = time.time()
        record = KeyRecord(
            self.fingerprint, now, now + guard.ttl, subject, context or {}, guard.holder
        )
        # The caller's bookkeeping as the guard holds it now (a sweep since this ticket was
        # opened forgot the one it had).
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
        # A takeover replaces the dead attempt's record it found, and no other.
        over = self.record.created_at if self.takeover and self.record is not None else None
        try:
            held = await guard.store.take(
                self.scope, self.key, record, replace=self.takeover, over=over
            )
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

    async def take_message(self, state: Any, inst: Any, req: Any) -> tuple[bool, bool]:
        """``POST /message``'s take: the key committed with the task the request starts or
        continues (named now, so the key records it), where that task's events and answer
        stood, its own webhook's id and its uploads' ids. Returns `prepare`'s
        (brought_back, fresh): whether the task was brought back already, whether its id
        is new. A retry that takes over from a first attempt that died reuses that
        attempt's task id, webhook id and upload ids (one task, not two)."""
        from mail.core.message import new_task_id

        if req.task_id is None and req.resume_from is None:
            if self.takeover and self.subject:
                req.task_id, brought_back, fresh = self.subject, False, False
            else:
                req.task_id, brought_back, fresh = new_task_id(), True, True
        elif state.finished is not None:  # a finished task named: back from the store first
            await state.finished.bring_back(inst, req.task_id)
            brought_back, fresh = True, False
        else:
            brought_back, fresh = False, False
        task = None if fresh else inst.swarm.get_task_by_id(req.task_id)
        if task is None and req.webhook is None and not req.attachments:
            context = FRESH_TASK_CONTEXTS[bool(req.stream)]  # (shared: never changed)
        else:
            answer = getattr(task, "response", None)
            context = {
                "after": len(task.events) if task is not None else 0,
                "answer": answer.get("id") if isinstance(answer, dict) else None,
                "stream": req.stream,
            }
        if req.webhook is not None:  # the id its own webhook gets: a repeat names that one
            context["webhook"] = f"wh_{uuid.uuid4().hex}"
        if req.attachments:
            context["uploads"] = ids = self._upload_ids(len(req.attachments))
            if self.takeover:  # what the dead attempt stored under them is replaced
                req.replaced_bytes = await _stored_upload_bytes(inst, ids)
        await self.take(req.task_id, context)
        return brought_back, fresh

    async def take_task(self, state: Any, inst: Any, task_id: str, message: Any, new: bool) -> None:
        """The key of a request that runs one task outside ``POST /message`` (``POST
        /interswarm/message``) committed with that task and where its events and answer
        stand, for the same resolver (`mail.server.message_replay.task_resolver`). `new`:
        an id just made up. The `message` (about to leave for a peer) keeps the id recorded
        with the key: a takeover sends it again under the same id, which the peer drops as
        a re-delivery."""
        if not new and state.finished is not None:
            await state.finished.bring_back(inst, task_id)
        earlier = self.context.get("message") if self.takeover else None
        if isinstance(earlier, str) and earlier:
            message["id"] = earlier
        task = None if new else inst.swarm.get_task_by_id(task_id)
        last = getattr(task, "response", None)
        after = 0 if task is None else len(task.events)
        context = {"after": after, "answer": (last or {}).get("id"), "message": message["id"]}
        await self.take(task_id, context)

    def _upload_ids(self, count: int) -> list[str]:
        from mail.core.team.service import new_id  # (lazily, as `store_uploads` does)

        earlier = self.context.get("uploads") if self.takeover else None
        if (
            isinstance(earlier, list)
            and len(earlier) == count
            and all(isinstance(i, str) and i.startswith("att_") for i in earlier)
        ):
            return earlier
        return [new_id("att") for _ in range(count)]

    def task_answered(self, inst: Any, req: Any, response: Any) -> None:
        """A plain answer of a task that completed is the task's own (its answer and its
        ``task_complete`` event are stored with it): no outcome row, a repeat rebuilds the
        same bytes from the task (`mail.server.message_replay`). Any other ending, and an
        answer with the events, keep their stored outcome."""
        message = response.get("message") if type(response) is dict else None
        if req.show_events or type(message) is not dict:
            return
        if (
            message.get("subject") != "::task_complete::"
            or type(message.get("body", "")) is not str
        ):
            return
        if message.get("task_id") in (None, "", req.task_id):
            self.task_ended(inst, req)

    def task_ended(self, inst: Any, req: Any) -> None:
        """The whole answer went out from the task (a plain one, or its stream): once the
        task no longer runs, it is the outcome (where the store knows tasks: it counts the
        key as finished by its task, `evict_finished`)."""
        if self.taken and self.guard.store.knows_tasks:
            task = inst.swarm.get_task_by_id(req.task_id or "")
            self.answered_by_task = task is not None and not task.is_running

    async def finish(self, response: Response, *, lazy: bool = False) -> Response:
        """Store the outcome of a taken key and return the answer.

        A streamed answer is not stored (a duplicate attaches to its task instead, see the
        route's resolver); the key stays "under way here" until the stream ends, and with
        `lazy` its outcome is then `STREAMED_OUTCOME` (no body). With `lazy` (a route whose
        resolver rebuilds the outcome from the work's own records), the outcome is written
        with others a moment later, and the key stays "under way here" until then; with
        `answered_by_task` too, it is not written at all."""
        if not self.taken:
            self.leave()
            return response
        if not hasattr(response, "body"):
            if getattr(response, "on_end", False) is None:  # an `EventStreamResponse`
                response.on_end = functools.partial(self.stream_ended, response)  # type: ignore[attr-defined]
                return response
            return Leaving(response, self, record=lazy)
        if lazy and self.answered_by_task:
            self.leave()  # its key and its task are committed: they are the outcome
            return response
        content_type, body = response.headers.get("content-type"), bytes(response.body)
        if lazy:
            self.guard.record_later(self, response.status_code, content_type, body)
            return response
        try:
            await self.guard.store.finish(
                self.scope, self.key, response.status_code, content_type, body
            )
            self.guard.booked(self, body)
        finally:
            self.leave()
        return response

    def stream_ended(self, response: Any) -> None:
        """An answer that streamed ended: a stream that started (its status line went out)
        records `STREAMED_OUTCOME`, unless its task's records are the outcome; one that never
        started leaves the key unfinished, as a request that died would."""
        if response.started and self.taken and not self.answered_by_task:
            self.guard.record_later(self, response.status_code, STREAMED_OUTCOME, b"")
        else:
            self.leave()

    async def store_outcome(self, response: Response) -> None:
        """Record `response` as the outcome of a key whose first request died (a resolver
        that rebuilt the answer from the work's own records)."""
        body = bytes(response.body)
        content_type = response.headers.get("content-type")
        await self.guard.store.finish(
            self.scope, self.key, response.status_code, content_type, body
        )
        self.guard.booked(self, body)

    async def release(self) -> None:
        """Forget the key this request took: it was refused before it did anything."""
        if self.taken:
            self.taken = False
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
        if self.owner:
            self.owner = False
            if self.guard._pending.get(self.slot) is self:  # type: ignore[arg-type]
                del self.guard._pending[self.slot]  # type: ignore[arg-type]


async def _stored_upload_bytes(inst: Any, ids: list[str]) -> int:
    """The bytes stored under `ids` already (a keyed retry's uploads, which replace them)."""
    team = getattr(inst.swarm, "team", None)
    if team is None:
        return 0
    total = 0
    for attachment_id in ids:
        earlier = await team.store.get_attachment(team.key, attachment_id, with_data=False)
        if earlier is not None:
            total += int(earlier[0].get("size") or 0)
    return total


class Leaving(Response):
    """A streamed answer (not an `EventStreamResponse`) that gives its key's "under way
    here" entry back when it ends; with `record`, one that started records
    `STREAMED_OUTCOME` then (`Ticket.stream_ended`)."""

    def __init__(self, inner: Response, ticket: Ticket, *, record: bool = False) -> None:
        self._inner = inner
        self._ticket = ticket
        self._record = record
        self.status_code = inner.status_code
        self.background = None
        self.raw_headers = inner.raw_headers
        self.started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.started = True
            await send(message)

        try:
            await self._inner(scope, receive, watched)
        finally:
            if self._record:
                self._ticket.stream_ended(self)
            else:
                self._ticket.leave()


# ------------------------------------------------------------------------- the decorator


def guard_of(request: Request) -> IdempotencyGuard | None:
    guard = getattr(request.scope.get("app"), "idempotency_guard", None)
    if guard is not None:
        return guard  # type: ignore[no-any-return]
    return getattr(server_state(request), "idempotency", None)


def current_ticket(request: Request) -> Ticket | None:
    """The ticket of a keyed request inside a route decorated with ``deferred=True``."""
    ticket: Ticket | None = request.scope.get(_SCOPE_KEY)
    return ticket


async def default_resolve(request: Request, caller: Caller, ticket: Ticket) -> Response | None:
    """A duplicate of an unfinished request: 409 while it runs (here, or in another process
    that took the key less than `idempotency_takeover_after` seconds ago); run again
    otherwise (its first attempt died with its process)."""
    if ticket.in_flight:
        return in_progress()
    record = ticket.record
    if (
        record is not None
        and record.holder != ticket.guard.holder
        and time.time() - record.created_at < ticket.guard.takeover_after
    ):
        return in_progress()
    return None


def _work_context(ticket: Ticket, names: str | Callable[[], str] | None) -> dict[str, Any] | None:
    """What a default-mode take records with its key (`idempotent`'s `names_work`)."""
    if names is None:
        return None
    if ticket.takeover and isinstance(ticket.context.get("work"), str):
        return {"work": ticket.context["work"]}  # the dead attempt's work: found again
    return {"work": names() if callable(names) else f"{names}_{uuid.uuid4().hex}"}


def idempotent(
    resolve: Resolver | None = None,
    *,
    caller: Callable[[Request], Awaitable[Caller]] = caller_admin_or_user,
    deferred: bool = False,
    lazy_outcome: bool = False,
    names_work: str | Callable[[], str] | None = None,
    prefer_async: bool = False,
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Make a route honour ``Idempotency-Key`` (see the module docstring).

    `caller` resolves the caller when the route has no ``caller`` parameter (the route's own
    check runs as well: it is memoised per request). `resolve` answers a duplicate of an
    unfinished request (default: :func:`default_resolve`); it returns None to have the route
    run again (taking the key over). `lazy_outcome`: the outcome may be written just after
    the answer leaves, batched with others; only for a route whose `resolve` rebuilds the
    outcome from records its work stores before it answers. `names_work` (a prefix, e.g.
    ``"wh"``, or a function making the value): the take records a new id for the work with
    the key (``current_ticket(request).context["work"]``), and a takeover keeps the dead
    attempt's; the route stores its work under that id and, taking over, answers with what
    that attempt stored under it, if anything, rather than doing the work a second time.
    `prefer_async`: the route answers ``Prefer: respond-async`` at once, so that header is
    part of what makes two requests the same (`fingerprint_and_value`).
    """
    resolver = resolve or default_resolve

    def decorate(endpoint: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(endpoint)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            request = next(v for v in (*args, *kwargs.values()) if isinstance(v, Request))
            scope = request.scope
            fields = [value for name, value in scope["headers"] if name == HEADER]
            guard = guard_of(request) if fields else None
            if guard is None:
                return await endpoint(*args, **kwargs)
            given = kwargs.get("caller")
            who = given if isinstance(given, Caller) else await caller(request)
            key = key_of(fields, guard.max_length)
            assert key is not None
            background = prefer_async and _prefers_async(request.headers.get("prefer"))
            digest, value = fingerprint_and_value(
                scope["method"], scope["path"], await request.body(), background
            )
            if type(value) is dict:  # the route's `read_json_object` takes it as it is
                scope[PARSED_BODY] = value
            ticket = guard.open(who, key, digest)
            if ticket.in_flight:
                return await _answer_duplicate(request, who, ticket, resolver)
            scope[_SCOPE_KEY] = ticket
            for _attempt in range(3):  # the first try, and at most two takeovers
                try:
                    if not deferred:
                        await ticket.take(None, _work_context(ticket, names_work))
                    response = await endpoint(*args, **kwargs)
                except KeyHeld as held:  # nothing ran: the key's first request answers
                    ticket.found(held.record)
                    answer = await _answer_duplicate(request, who, ticket, resolver)
                    if answer is not None:
                        return answer
                    continue  # its first attempt died: this one does the work (takeover)
                except BaseException:
                    await ticket.abandon(release=not deferred)
                    raise
                if not isinstance(response, Response):
                    response = Response(dumps(response), media_type="application/json")
                return await ticket.finish(response, lazy=lazy_outcome)
            ticket.leave()
            return in_progress()

        # FastAPI reads the route's parameters from this signature; evaluated here, in the
        # route's module, as its string annotations name that module's imports.
        guarded.__signature__ = inspect.signature(endpoint, eval_str=True)  # type: ignore[attr-defined]
        return guarded

    return decorate


async def _answer_duplicate(
    request: Request, caller: Caller, ticket: Ticket, resolver: Resolver
) -> Response | None:
    """What a duplicate gets; None when it is to run the work itself (a takeover: only the
    owner of the key's "under way here" entry ever does)."""
    record = ticket.record or ticket.outcome  # stored, or answered and being stored
    if record is not None and record.finished and not record.streamed:
        ticket.leave()
        return replay(record)
    try:
        answer = await resolver(request, caller, ticket)
    except BaseException:
        ticket.leave()
        raise
    if answer is not None:
        ticket.leave()
        if REPLAYED_HEADER not in answer.headers and answer.status_code < 400:
            answer.headers[REPLAYED_HEADER] = "true"
        return answer
    if not ticket.owner:  # a duplicate of a request under way here: never run it twice
        return in_progress()
    ticket.takeover = True
    return None
