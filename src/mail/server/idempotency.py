"""``Idempotency-Key`` on the routes that start or change work: a retry never runs it twice.

What a client sees is in docs/api-http.md#idempotency-keys. Above the key store
(``mail.store.idempotency``): the wire format (header, fingerprint, answers), the
:class:`IdempotencyGuard` (one per server: the requests under way here, each caller's count of
keys), the :class:`Ticket` of one keyed request, and the :func:`idempotent` decorator a route
opts in with: the key is taken before the route runs (released when it raises), or by the route
itself (``deferred=True``: ``current_ticket(request).take(subject, context)``) right before its
work starts, with a ``resolve`` that answers a duplicate (``mail.server.message_replay``).
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
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException, Request
from starlette.responses import Response

from mail.server.auth import Caller, caller_admin_or_user, server_state
from mail.server.bodies import prefer_async as _prefers_async
from mail.server.errors import BadRequest
from mail.server.jsonio import PARSED_BODY, _orjson, dumps, loads
from mail.store.base import STREAMED_OUTCOME, InstanceKey
from mail.store.idempotency import IdempotencyStore, KeyRecord, open_key_store
from mail.utils.background import hold

logger = logging.getLogger("mail.server.idempotency")

HEADER = b"idempotency-key"
REPLAYED_HEADER = "Idempotent-Replayed"
DOCS = "docs/api-http.md#idempotency-keys"
IN_PROGRESS_RETRY_AFTER = 1  # seconds a duplicate of a request under way waits
KEY_LIMIT_RETRY_AFTER = 60  # seconds a caller at the key bound waits (at most the key TTL)
# At the key bound, this share of it (at least one key) of the oldest finished keys goes.
EVICT_FRACTION = 0.1
SWEEP_INTERVAL = 600.0  # seconds between two sweeps of expired keys
# Default of `[server.settings] idempotency_takeover_after`: a key another process took and
# never finished is taken over by a retry after this many seconds.
TAKEOVER_AFTER = 60.0
_SCOPE_KEY = "mail.idempotency"  # where a keyed request's ticket waits for its route

Resolver = Callable[[Request, Caller, "Ticket"], Awaitable[Response | None]]

# ------------------------------------------------------------------------------ the wire

_SF_STRING = re.compile(r'"((?:[^"\\]|\\["\\])*)"')


def key_of(fields: list[bytes], max_length: int) -> str | None:
    """The key of the ``Idempotency-Key`` header `fields` (an RFC 8941 string, or the same
    characters unquoted), None without one; 400 for a malformed one or two of them."""
    if not fields:
        return None
    if len(fields) > 1:
        raise BadRequest(f"send one Idempotency-Key header, not {len(fields)} (see {DOCS})")
    key: str | None = fields[0].decode("latin-1").strip()  # (as Starlette decodes headers)
    if key and key.startswith('"'):
        match = _SF_STRING.fullmatch(key)
        key = None if match is None else re.sub(r"\\(.)", r"\1", match.group(1))
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


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two requests "the same": method, path and the body as canonical JSON."""
    return fingerprint_and_value(method, path, body)[0]


def fingerprint_and_value(
    method: str, path: str, body: bytes, background: bool = False
) -> tuple[str, Any]:
    """`fingerprint` and the body's JSON value (None when not JSON: then hashed as it is).
    `background`: ``Prefer: respond-async``, the same as ``"background": true`` in the body."""
    value, canonical = None, body
    if body:
        try:
            value = hashed = loads(body)
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
    detail = detail or (
        "a request with this Idempotency-Key is still being processed; retry after "
        f"{IN_PROGRESS_RETRY_AFTER}s to get its outcome"
    )
    headers = {"Retry-After": str(IN_PROGRESS_RETRY_AFTER)}
    return Response(dumps({"detail": detail, **extra}), 409, headers, "application/json")


def key_reused() -> HTTPException:
    return HTTPException(
        422,
        "this Idempotency-Key was already used for a different request (another method, "
        "path or body); send a new key with a new request",
    )


def replay(record: KeyRecord) -> Response:
    """The stored outcome, as it answered (a 202's `Location` is its body's `status_url`)."""
    headers = {REPLAYED_HEADER: "true"}
    if record.status == 202 and record.body:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            location = loads(record.body).get("status_url")
            if isinstance(location, str):
                headers["Location"] = location
    return Response(record.body or b"", record.status or 200, headers, record.content_type)


# ----------------------------------------------------------------------------- the guard


@dataclass(slots=True, eq=False)
class CallerKeys:
    """One caller's keys as this process counts them."""

    scope: InstanceKey
    count: int | None = None  # live keys, counted plus taken since; None: unknown
    # Slots reserved (counted) by takes not yet stored; reserving is synchronous, so
    # concurrent new keys cannot pass the bound.
    reserved: int = 0
    # While a recount runs: keys stored since it began (its read may predate them).
    landed: int | None = None
    counting: asyncio.Lock = field(default_factory=asyncio.Lock)  # one recount at a time
    waiting: int = 0  # takes at that lock: a sweep keeps this object meanwhile


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
        self.takeover_after = takeover_after
        self.swarm_name = swarm_name
        self.ttl = ttl
        self.max_keys = max_keys
        self.max_length = max_length
        # Who took a key: host, process and a random tag (containers may share both).
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        # The owners' tickets of the keyed requests under way here, by (role, id, key).
        self._pending: dict[tuple[str, str, str], Ticket] = {}
        self._callers: dict[tuple[str, str], CallerKeys] = {}
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        self._background: set[asyncio.Task[Any]] = set()
        # Under [server.store] max_stored_bytes_per_caller: (scope, task id, outcome bytes).
        self.book_outcome: Callable[[InstanceKey, str, int], None] | None = None

    def caller_keys(self, role: str, ident: str) -> CallerKeys:
        if (keys := self._callers.get((role, ident))) is None:
            scope = InstanceKey(self.swarm_name, role, ident)
            keys = self._callers[(role, ident)] = CallerKeys(scope)
        return keys

    def scope(self, caller: Caller) -> InstanceKey:
        return self.caller_keys(caller.role, caller.id).scope

    def open(self, caller: Caller, key: str, fingerprint: str) -> Ticket:
        """The ticket of a request with `key`: a duplicate of one under way here, or the
        key's owner here (whether the store has the key already, its take tells)."""
        slot = (caller.role, caller.id, key)
        keys = self.caller_keys(caller.role, caller.id)
        first = self._pending.get(slot)
        if first is None:
            ticket = self._pending[slot] = Ticket(self, keys, key, fingerprint, caller)
            return ticket
        if first.fingerprint != fingerprint:
            raise key_reused()
        return Ticket(self, keys, key, fingerprint, caller, first)

    def reserve(self, keys: CallerKeys) -> bool:
        """Count one more key of a caller known to hold fewer than `max_keys`; False when
        its count is unknown or at the bound (then `admit`)."""
        if not self.max_keys:
            return True
        if keys.count is None or keys.count >= self.max_keys:
            return False
        keys.count += 1
        keys.reserved += 1
        return True

    def unreserve(self, keys: CallerKeys, *, stored: bool) -> None:
        if not self.max_keys:
            return
        keys.reserved -= 1
        if not stored and keys.count:
            keys.count -= 1
        elif stored and keys.landed is not None:
            keys.landed += 1

    async def admit(self, keys: CallerKeys, key: str, now: float) -> None:
        """`reserve` once the caller's keys are counted from the store: at the bound, the
        oldest finished keys are forgotten (`EVICT_FRACTION` of it); 429 when none is."""
        keys.waiting += 1
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
            headers={"Retry-After": str(max(1, min(KEY_LIMIT_RETRY_AFTER, math.ceil(self.ttl))))},
        )

    async def _recount(self, keys: CallerKeys, key: str, now: float) -> None:
        scope = keys.scope
        keys.landed = 0
        try:
            if keys.count is not None:
                await self.store.purge(now, scope)
            count = await self.store.count(scope, now)
            # Keys stored meanwhile and takes not yet stored count too; a repeat of a held key
            # makes no room (its own record must not be evicted).
            held = count + (keys.landed or 0) + keys.reserved
            if held >= self.max_keys and await self.store.get(scope, key, now) is None:
                await self.flush_outcomes()
                batch = held - self.max_keys + max(1, int(self.max_keys * EVICT_FRACTION))
                who = (scope.caller_role, scope.caller_id)
                busy = frozenset(k for (r, i, k) in self._pending if (r, i) == who)
                count -= await self.store.evict_finished(scope, batch, busy)
        finally:
            # (Counted twice if the read saw them too: errs toward the bound until next time.)
            landed, keys.landed = keys.landed or 0, None
        keys.count = count + landed + keys.reserved

    def maybe_sweep(self) -> None:
        """Every `SWEEP_INTERVAL`: expired keys purged, every caller counted again."""
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        for owner, keys in list(self._callers.items()):
            keys.count = None
            if not keys.reserved and keys.landed is None and not keys.waiting:
                del self._callers[owner]  # nothing under way here: forgotten
        self.spawn(self.store.purge(time.time()), "sweeping expired idempotency keys")

    async def flush_outcomes(self) -> None:
        """Wait for the outcomes (and sweeps) being written."""
        await asyncio.gather(*self._background, return_exceptions=True)

    def spawn(self, work: Awaitable[Any], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:  # noqa: BLE001 - background housekeeping: logged, retried later
                logger.warning("%s failed", what, exc_info=True)

        hold(self._background, asyncio.get_running_loop().create_task(run()))

    async def close(self) -> None:
        await self.flush_outcomes()
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
    """Raised by `Ticket.take`: the store holds the key for this same request already (a
    retry, or its first attempt still under way). The route stops; the guard answers."""

    def __init__(self, record: KeyRecord) -> None:
        super().__init__("idempotency key already taken")
        self.record = record


class Ticket:
    """One keyed request: what was found for its key, and its take / finish. A duplicate of
    a request under way here has that request's ticket as `first`, which keeps what it
    started (`subject`, `context`) and answered."""

    def __init__(
        self,
        guard: IdempotencyGuard,
        keys: CallerKeys,
        key: str,
        fingerprint: str,
        caller: Caller,
        first: Ticket | None = None,
    ) -> None:
        self.guard = guard
        self.keys = keys
        self.scope = keys.scope
        self.key = key
        self.fingerprint = fingerprint
        self.caller = caller
        self.first = first
        self.in_flight = first is not None
        self.owner = first is None  # of its "under way here" entry, until it leaves it
        # What the request started (a task id) and what its route needs to find it again.
        self._subject: str | None = None
        self._context: Mapping[str, Any] | None = None
        # Its answer, until written (`record_later`): what a duplicate meanwhile replays.
        self.answered: KeyRecord | None = None
        self.record: KeyRecord | None = None  # the live record found in the store
        self.takeover = False  # this request redoes the work of a first attempt that died
        self.taken = False
        # The task's own answer is the outcome: none stored, a repeat rebuilds it (resolver).
        self.answered_by_task = False

    def found(self, record: KeyRecord) -> None:
        self.record, self._subject, self._context = record, record.subject, record.context

    @property
    def subject(self) -> str | None:
        return (self.first or self)._subject

    @property
    def context(self) -> Mapping[str, Any]:
        return (self.first or self)._context or {}

    async def take(self, subject: str | None = None, context: dict[str, Any] | None = None) -> None:
        """Commit the key (with what the work is) before the work starts; 409/422/429 when
        it cannot be taken (then nothing may start)."""
        guard = self.guard
        now = time.time()
        record = KeyRecord(
            self.fingerprint, now, now + guard.ttl, subject, context or {}, guard.holder
        )
        # (As the guard holds them now: a sweep since `open` forgot the ones it had.)
        keys = self.keys = guard.caller_keys(self.scope.caller_role, self.scope.caller_id)
        counted = not self.takeover
        if counted and not guard.reserve(keys):
            try:
                await guard.admit(keys, self.key, now)
            except HTTPException:
                # At the bound: a repeat of a request whose key is held gets its answer.
                if (held := await guard.store.get(self.scope, self.key, now)) is None:
                    raise
                raise (
                    key_reused() if held.fingerprint != self.fingerprint else KeyHeld(held)
                ) from None
        # A takeover replaces the dead attempt's record it found, and no other.
        over = self.record.created_at if self.takeover and self.record is not None else None
        held = record
        try:
            held = await guard.store.take(
                self.scope, self.key, record, replace=self.takeover, over=over
            )
        finally:
            if counted:
                guard.unreserve(keys, stored=held is None)
        if held is not None:  # an earlier request has the key: the route must not go on
            raise key_reused() if held.fingerprint != self.fingerprint else KeyHeld(held)
        self.taken = True
        self._subject, self._context = subject, record.context
        guard.maybe_sweep()

    async def take_message(self, state: Any, inst: Any, req: Any) -> tuple[bool, bool]:
        """``POST /message``'s take: the key committed with the task the request starts or
        continues, where its events and answer stood, its webhook's and uploads' ids.
        Returns (brought_back, fresh). A takeover reuses the dead attempt's ids."""
        from mail.core.message import new_task_id

        brought_back = fresh = False
        if req.task_id is None and req.resume_from is None:
            brought_back = fresh = not (self.takeover and self.subject)
            req.task_id = new_task_id() if fresh else self.subject
        else:  # a finished task named: back from the store first
            await state.finished.bring_back(inst, req.task_id)
            brought_back = True
        context = {**_task_context(inst, None if fresh else req.task_id), "stream": req.stream}
        if req.webhook is not None:  # the id its own webhook gets: a repeat names that one
            context["webhook"] = f"wh_{uuid.uuid4().hex}"
        if req.attachments:
            from mail.core.team.service import new_id  # (lazily, as `store_uploads` does)

            ids = self.context.get("uploads") if self.takeover else None
            count = len(req.attachments)
            if not (
                isinstance(ids, list)
                and len(ids) == count
                and all(isinstance(i, str) and i.startswith("att_") for i in ids)
            ):
                ids = [new_id("att") for _ in range(count)]
            context["uploads"] = ids
            team = getattr(inst.swarm, "team", None)
            if self.takeover and team is not None:  # the dead attempt's uploads are replaced
                req.replaced_bytes = 0
                for attachment_id in ids:
                    earlier = await team.store.get_attachment(
                        team.key, attachment_id, with_data=False
                    )
                    if earlier is not None:
                        req.replaced_bytes += int(earlier[0].get("size") or 0)
        await self.take(req.task_id, context)
        return brought_back, fresh

    async def take_task(self, state: Any, inst: Any, task_id: str, message: Any, new: bool) -> None:
        """The take of a request that runs one task outside ``POST /message`` (``POST
        /interswarm/message``), for `message_replay.task_resolver`; `new`: a new task id.
        A takeover sends `message` again under its first id (a peer drops re-deliveries)."""
        if not new:
            await state.finished.bring_back(inst, task_id)
        earlier = self.context.get("message") if self.takeover else None
        if isinstance(earlier, str) and earlier:
            message["id"] = earlier
        context = {**_task_context(inst, None if new else task_id), "message": message["id"]}
        await self.take(task_id, context)

    def task_answered(self, inst: Any, req: Any, response: Any) -> None:
        """A plain answer of a completed task is the task's own: no outcome row, a repeat
        rebuilds it from the task. Other endings, and answers with events, store theirs."""
        message = response.get("message") if type(response) is dict else None
        if (
            not req.show_events
            and type(message) is dict
            and message.get("subject") == "::task_complete::"
            and type(message.get("body", "")) is str
            and message.get("task_id") in (None, "", req.task_id)
        ):
            self.task_ended(inst, req)

    def task_ended(self, inst: Any, req: Any) -> None:
        """The whole answer went out from the task: once it no longer runs, it is the
        outcome (where the store knows tasks, `evict_finished`)."""
        if self.taken and self.guard.store.knows_tasks:
            task = inst.swarm.get_task_by_id(req.task_id or "")
            self.answered_by_task = task is not None and not task.is_running

    async def finish(self, response: Response, *, lazy: bool = False) -> Response:
        """Store the outcome of a taken key and return the answer; with `lazy` (the resolver
        rebuilds outcomes from the work's records) after the answer left, or not at all when
        `answered_by_task`. A stream's is recorded when it ends (`stream_ended`)."""
        if not self.taken:
            self.leave()
        elif not hasattr(response, "body"):  # an `EventStreamResponse`: recorded at its end
            response.on_end = functools.partial(self.stream_ended, response)  # type: ignore[attr-defined]
        elif lazy and self.answered_by_task:
            self.leave()  # its key and its task are committed: they are the outcome
        elif lazy:
            content_type = response.headers.get("content-type")
            self.record_later(response.status_code, content_type, bytes(response.body))
        else:
            try:
                await self.store_outcome(response)
            finally:
                self.leave()
        return response

    def stream_ended(self, response: Any) -> None:
        """A stream that started records `STREAMED_OUTCOME` (unless its task's records are
        the outcome); one that never started leaves the key unfinished."""
        if response.started and self.taken and not self.answered_by_task:
            self.record_later(response.status_code, STREAMED_OUTCOME, b"")
        else:
            self.leave()

    def record_later(self, status: int, content_type: str | None, body: bytes) -> None:
        """Write the outcome after its answer left, then leave the "under way here" entry."""
        (self.first or self).answered = KeyRecord(
            self.fingerprint, 0.0, 0.0, status=status, content_type=content_type, body=body
        )

        async def write() -> None:
            try:
                await self._write(status, content_type, body)
            finally:
                self.leave()

        self.guard.spawn(write(), "recording an idempotency outcome")

    async def store_outcome(self, response: Response) -> None:
        """Record `response` as the key's outcome."""
        content_type = response.headers.get("content-type")
        await self._write(response.status_code, content_type, bytes(response.body))

    async def _write(self, status: int, content_type: str | None, body: bytes) -> None:
        guard = self.guard
        await guard.store.finish(self.scope, self.key, status, content_type, body)
        if guard.book_outcome is not None and self.subject:
            guard.book_outcome(self.scope, self.subject, len(body))

    async def release(self) -> None:
        """Forget the key this request took: it was refused before it did anything."""
        if self.taken:
            self.taken = False
            if self.keys.count:
                self.keys.count -= 1
            await self.guard.store.release(self.scope, self.key)

    async def abandon(self, *, release: bool) -> None:
        """The route raised; with `release` the key is forgotten before the error leaves."""
        try:
            if release:
                await self.release()
        except Exception:  # noqa: BLE001 - the key stays taken: a retry is told to wait
            logger.warning("releasing an idempotency key failed", exc_info=True)
        finally:
            self.leave()

    def leave(self) -> None:
        """Give up this request's "under way here" entry (idempotent)."""
        if self.owner:
            self.owner = False
            slot = (self.scope.caller_role, self.scope.caller_id, self.key)
            if self.guard._pending.get(slot) is self:
                del self.guard._pending[slot]


def _task_context(inst: Any, task_id: str | None) -> dict[str, Any]:
    """Where a task's events and answer stood (nothing yet without a task): what a repeat
    answers comes after that."""
    task = None if task_id is None else inst.swarm.get_task_by_id(task_id)
    answer = getattr(task, "response", None)
    return {
        "after": 0 if task is None else len(task.events),
        "answer": answer.get("id") if isinstance(answer, dict) else None,
    }


# ------------------------------------------------------------------------- the decorator


def current_ticket(request: Request) -> Ticket | None:
    """The ticket of a keyed request inside a route decorated with ``deferred=True``."""
    return request.scope.get(_SCOPE_KEY)


async def default_resolve(request: Request, caller: Caller, ticket: Ticket) -> Response | None:
    """409 while the first request runs (here, or in another process that took the key less
    than `takeover_after` seconds ago); else None: run again (its process died)."""
    record, guard = ticket.record, ticket.guard
    if ticket.in_flight or (
        record is not None
        and record.holder != guard.holder
        and time.time() - record.created_at < guard.takeover_after
    ):
        return in_progress()
    return None


def _work_context(ticket: Ticket, names: str | Callable[[], str] | None) -> dict[str, Any] | None:
    if names is None:
        return None
    if ticket.takeover and isinstance(ticket.context.get("work"), str):
        return {"work": ticket.context["work"]}  # the dead attempt's work: found again
    return {"work": names() if callable(names) else f"{names}_{uuid.uuid4().hex}"}


def idempotent(
    resolve: Resolver | None = None,
    *,
    deferred: bool = False,
    lazy_outcome: bool = False,
    names_work: str | Callable[[], str] | None = None,
    prefer_async: bool = False,
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Make a route honour ``Idempotency-Key`` (its caller: the route's ``caller`` parameter,
    or `caller_admin_or_user`). `resolve` answers a duplicate of an unfinished request
    (default `default_resolve`), None to run the route again (a takeover). `lazy_outcome`:
    the outcome may be written just after the answer (for a `resolve` that rebuilds it from
    the work's records). `names_work` (a prefix or a function): the take records a new id for
    the work in ``context["work"]``, and a takeover keeps the dead attempt's.
    `prefer_async`: ``Prefer: respond-async`` is part of the fingerprint."""
    resolver = resolve or default_resolve

    def decorate(endpoint: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(endpoint)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            request = next(v for v in (*args, *kwargs.values()) if isinstance(v, Request))
            scope = request.scope
            fields = [value for name, value in scope["headers"] if name == HEADER]
            guard: IdempotencyGuard | None = None
            if fields:
                guard = getattr(scope.get("app"), "idempotency_guard", None)
                guard = guard or getattr(server_state(request), "idempotency", None)
            if guard is None:
                return await endpoint(*args, **kwargs)
            given = kwargs.get("caller")
            who = given if isinstance(given, Caller) else await caller_admin_or_user(request)
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

        # FastAPI reads the route's parameters from this (string annotations evaluated here).
        guarded.__signature__ = inspect.signature(endpoint, eval_str=True)  # type: ignore[attr-defined]
        return guarded

    return decorate


async def _answer_duplicate(
    request: Request, caller: Caller, ticket: Ticket, resolver: Resolver
) -> Response | None:
    """What a duplicate gets; None when it is to run the work itself (a takeover: only the
    owner of the "under way here" entry)."""
    record = ticket.record or (ticket.first or ticket).answered  # stored, or being stored
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
