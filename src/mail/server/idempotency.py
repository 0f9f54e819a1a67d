"""``Idempotency-Key`` on the routes that start or change work: a retry never runs it twice.

The convention is the IETF's (draft-ietf-httpapi-idempotency-key-header): the client sends
``Idempotency-Key: "<unique value>"`` (a Structured Field string; a bare token is accepted
too) and sends it again, unchanged, with the same request when it retries. Keys belong to
the caller (role and id): another caller's key of the same value is another key.

- first request with a key: the work is done; the key record (with what the work started,
  e.g. a task id) is committed *before* the work starts, and the outcome (status, body)
  before the answer leaves;
- the same key and the same request again (method, path and body; the body compared as
  canonical JSON): the stored outcome, with ``Idempotent-Replayed: true``, and nothing is
  done again;
- the same key while the first request is still under way: 409 with ``Retry-After`` (a
  route may answer otherwise: ``POST /message`` with ``stream: true`` attaches to the task's
  event stream);
- the same key with another request: 422; a malformed key (or two of them): 400; more live
  keys than ``max_idempotency_keys_per_caller``: 429. A request without the header runs as
  before; no route requires one.

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

Keys live ``idempotency_key_ttl`` seconds (24 h by default) in the server's store (memory,
SQLite or PostgreSQL: ``mail.store.idempotency``), so they survive a restart and every front
end of a cluster sees them.
"""

from __future__ import annotations

import functools
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from starlette.responses import Response

from mail.server.auth import Caller, caller_admin_or_user, server_state
from mail.server.idempotency_guard import IdempotencyGuard, KeyHeld, Ticket
from mail.server.idempotency_start import start_guard
from mail.server.idempotency_wire import (
    REPLAYED_HEADER,
    fingerprint,
    fingerprint_and_value,
    in_progress,
    key_fields,
    key_of,
    replay,
)
from mail.server.jsonio import PARSED_BODY, dumps

__all__ = [
    "REPLAYED_HEADER",
    "IdempotencyGuard",
    "Ticket",
    "current_ticket",
    "default_resolve",
    "fingerprint",
    "idempotent",
    "in_progress",
    "start_guard",
]

# Where a keyed request's ticket is kept for the route (`current_ticket`).
_SCOPE_KEY = "mail.idempotency"
# `guarded`'s answer for an app that does not hold a guard of its own (not the server's).
_ANOTHER_APP = object()
# Seconds after which a key another process took and never finished is taken over by a
# retry (routes without a resolver of their own: their work is short); the default of
# `[server.settings] idempotency_takeover_after`.
TAKEOVER_AFTER = 60.0

Resolver = Callable[[Request, Caller, Ticket], Awaitable[Response | None]]


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
    that took the key less than `idempotency_takeover_after` seconds ago); run again otherwise (its first
    attempt died with its process)."""
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


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Request:
    for value in (*args, *kwargs.values()):
        if isinstance(value, Request):
            return value
    raise TypeError("an @idempotent route must take the Request")


def idempotent(
    resolve: Resolver | None = None,
    *,
    caller: Callable[[Request], Awaitable[Caller]] = caller_admin_or_user,
    deferred: bool = False,
    lazy_outcome: bool = False,
    names_work: str | Callable[[], str] | None = None,
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Make a route honour ``Idempotency-Key`` (see the module docstring).

    `caller` resolves the caller when the route has no ``caller`` parameter (the route's own
    check runs as well: it is memoised per request). `resolve` answers a duplicate of an
    unfinished request (default: :func:`default_resolve`); it returns None to have the route
    run again (taking the key over). `lazy_outcome`: the outcome may be written just after
    the answer leaves, batched with others (see `Ticket.finish`); only for a route whose
    `resolve` rebuilds the outcome from records its work stores before it answers.
    `names_work` (a prefix, e.g. ``"wh"``, or a function making the value): the take records
    a new id for the work with the key (``current_ticket(request).context["work"]``), and a
    takeover keeps the dead
    attempt's; the route stores its work under that id and, taking over, answers with what
    that attempt stored under it, if anything, rather than doing the work a second time.
    """
    resolver = resolve or default_resolve
    with_work = deferred and lazy_outcome  # (`Ticket.with_work`)

    def decorate(endpoint: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(endpoint)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            request = args[0] if args and isinstance(args[0], Request) else None
            if request is None:
                request = _request_of(args, kwargs)
            fields = key_fields(request)
            if not fields:
                return await endpoint(*args, **kwargs)
            scope = request.scope
            # (The server's app holds its guard; another app, e.g. a test's, its state.)
            guard: Any = getattr(scope["app"], "idempotency_guard", _ANOTHER_APP)
            if guard is _ANOTHER_APP:
                guard = guard_of(request)
            if guard is None:
                return await endpoint(*args, **kwargs)
            given = kwargs.get("caller")
            who = given if isinstance(given, Caller) else await caller(request)
            key = key_of(fields, guard.max_length)
            assert key is not None
            body = await request.body()
            digest, value = fingerprint_and_value(scope["method"], scope["path"], body)
            if type(value) is dict:  # the route's `read_json_object` takes it as it is
                scope[PARSED_BODY] = value
            ticket = guard.open(who, key, digest, with_work=with_work)
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
                if not ticket.taken or (
                    lazy_outcome and ticket.answered_by_task and hasattr(response, "body")
                ):
                    ticket.leave()  # (`Ticket.finish`'s usual cases, with no coroutine)
                    return response
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
        if ticket.in_flight:  # told of a request under way: its key and task are stored first
            await ticket.guard.store.settle(ticket.scope, ticket.key)
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
