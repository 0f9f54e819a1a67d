"""What a streamed answer does with its ``Idempotency-Key`` when it ends (`Ticket.finish`):
its "under way here" entry given back, and the key marked answered (`STREAMED_OUTCOME`)
once the stream started, unless its task's own records are the outcome."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from mail.store.idempotency import STREAMED_OUTCOME

# The answers' tickets are `mail.server.idempotency_guard.Ticket`s (that module imports this
# one: they are typed `Any` here).


class Leaving(Response):
    """A streamed answer that gives its key's "under way here" entry back when it ends.

    With `record`, a stream that started (its headers went out: the route sends none before
    its work is stored) records `STREAMED_OUTCOME` as the key's outcome when it ends, however
    it ends: a repeat is answered from the work (the resolver), never from the key; none
    when the route found the work's own records to be the outcome (`answered_by_task`: the
    whole stream went out and its task ended). One that never started leaves the key
    unfinished, as a request that died would (a repeat may run it: its work may not have
    begun)."""

    def __init__(self, inner: Response, ticket: Any, *, record: bool = False) -> None:
        self._inner = inner
        self._ticket = ticket
        self._record = record
        self.status_code = inner.status_code
        self.background = None
        self.raw_headers = inner.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        inner = self._inner
        started = False
        # An answer that says whether its status line went out (`EventStreamResponse.started`)
        # is not watched message by message.
        told = isinstance(getattr(inner, "started", None), bool)

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await inner(scope, receive, watched if self._record and not told else send)
        finally:
            if told:
                started = bool(getattr(inner, "started", False))
            ticket = self._ticket
            if started and ticket.taken and not ticket.answered_by_task:
                ticket.guard.record_later(ticket, self.status_code, STREAMED_OUTCOME, b"")
            else:
                ticket.leave()


def stream_ended(response: Any, ticket: Any) -> None:
    """An `EventStreamResponse` (it says whether its status line went out) ended: as
    `Leaving` does after the stream it wraps."""
    if response.started and ticket.taken and not ticket.answered_by_task:
        ticket.guard.record_later(ticket, response.status_code, STREAMED_OUTCOME, b"")
    else:
        ticket.leave()
