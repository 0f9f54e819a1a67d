"""Server-sent events: framing of runtime events and the streaming response."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mail.core.message import utc_now_iso
from mail.server.jsonio import dumps_str, loads
from mail.server.stream_buffer import BoundedFrameQueue
from mail.server.stream_shutdown import FinalEvent, OpenStreams, StreamSlot

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _data_text(data: Any) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return dumps_str(data)


def _event_fields(event: Any) -> tuple[Any, Any, Any, Any, Any]:
    """(event, data, id, retry, comment) of an event object or a dict with those keys."""
    if isinstance(event, dict):
        get = event.get
        return get("event"), get("data"), get("id"), get("retry"), get("comment")
    return (
        getattr(event, "event", None),
        getattr(event, "data", None),
        getattr(event, "id", None),
        getattr(event, "retry", None),
        getattr(event, "comment", None),
    )


def encode_event(event: Any) -> bytes:
    """One SSE frame for an event object or a ``{"event","data","id"}`` dict."""
    name, data, ev_id, retry, comment = _event_fields(event)
    parts: list[str] = []
    if comment:
        parts.extend(f": {line}\r\n" for line in _LINE_BREAK.split(str(comment)))
    if ev_id is not None:
        parts.append(f"id: {ev_id}\r\n")
    if name:
        parts.append(f"event: {name}\r\n")
    text = _data_text(data)
    if "\n" in text or "\r" in text:
        # Only CR and LF end an SSE line (not the other breaks str.splitlines knows, such as
        # U+2028, which JSON text may hold raw): split on those alone, so the reader's
        # "\n".join gives the text back.
        parts.extend(f"data: {line}\r\n" for line in _LINE_BREAK.split(text))
    else:
        parts.append(f"data: {text}\r\n")
    if retry is not None:
        parts.append(f"retry: {int(retry)}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode("utf-8")


def event_stream_response(
    events: AsyncIterator[Any],
    *,
    max_buffer_bytes: int | None = None,
    stall_timeout: float = 5.0,
    task_id: str | None = None,
    streams: OpenStreams | None = None,
    slot: StreamSlot | None = None,
    opened: asyncio.Event | None = None,
    committed: Callable[[], Awaitable[object] | None] | None = None,
) -> EventStreamResponse:
    """An SSE response; with ``max_buffer_bytes``, a slow reader is asked to resubscribe."""
    limit = sys.maxsize if max_buffer_bytes is None else max_buffer_bytes
    queue = BoundedFrameQueue(
        events,
        encode_event,
        limit,
        lambda last_id: resubscribe_event(
            task_id or "", last_id, slow_reader_reason(limit, stall_timeout)
        ),
        stall_timeout,
        opened,
        committed,
    )
    return EventStreamResponse(
        queue,
        lambda last_id: resubscribe_event(task_id or "", last_id, SHUTDOWN_REASON),
        streams,
        slot,
        opened is not None,
    )


class EventStreamResponse(Response):
    """An SSE response served from a :class:`BoundedFrameQueue`.

    Unlike Starlette's ``StreamingResponse`` it needs no task group (one plain task watches
    for the client going away) and it ends the body in the same write as the last chunk.
    Registered with ``streams`` while it runs, so a server shutdown ends it cleanly.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        queue: BoundedFrameQueue,
        final_event: FinalEvent,
        streams: OpenStreams | None = None,
        slot: StreamSlot | None = None,
        hold_start: bool = False,
    ) -> None:
        self.queue = queue
        # Headers wait until the queue is `opened` (see `event_stream_response`).
        self.hold_start = hold_start
        self.final_event = final_event
        self.streams = streams
        self.slot = slot  # the caller's stream slot, given back when the response ends
        self.status_code = 200
        self.background = None
        self.init_headers(SSE_HEADERS)
        # Set as the status line goes out, whatever it is (read by `mail.server.idempotency`, which
        # otherwise has to watch every message sent).
        self.started = False
        # Called once the response ended, however it ended (its Idempotency-Key's ticket
        # leaves, `Ticket.finish`): no wrapper around the whole stream,
        # whose frame every resumption of the response would pass through.
        self.on_end: Callable[[], None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        opened = self.queue.opened if self.hold_start else None
        if opened is None:
            self.started = True
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        else:
            self.queue.start()  # the source runs (and sets `opened`) before the body is read
        task = asyncio.current_task()
        state = {"finished": False, "gone": False}

        def hang_up(watch: asyncio.Task[None]) -> None:
            # The client went away: stop this response at its current wait.
            if state["finished"] or watch.cancelled() or watch.exception() is not None:
                return
            state["gone"] = True
            if task is not None:
                task.cancel()

        watcher = asyncio.create_task(_until_disconnect(receive))
        watcher.add_done_callback(hang_up)
        if self.streams is not None:
            self.streams.add(self.queue, self.final_event)
        chunks = self.queue.chunks()
        try:
            if opened is not None:
                await opened.wait()
                refused = self.queue.refused()
                if refused is not None:  # nothing went out: refused as a plain request is
                    self.started = True  # (a status line all the same: 503)
                    await _send_unavailable(send, refused)
                    return
                self.started = True
                await send(
                    {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                )
            async for chunk, last in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if last:
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not state["gone"] or task is None:
                raise
            task.uncancel()  # ours: the client hung up, nothing more to send
        finally:
            try:
                state["finished"] = True
                watcher.cancel()
                await chunks.aclose()  # stops the reader and closes the source now
                await self.queue.stop()  # (one started before the body was read, too)
                if self.streams is not None:
                    self.streams.discard(self.queue)
                if self.slot is not None:
                    self.slot.release()
            finally:
                if self.on_end is not None:
                    self.on_end()


async def _send_unavailable(send: Send, error: BaseException) -> None:
    body = dumps_str({"detail": str(error)}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"5"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


RESUBSCRIBE_EVENT = "resubscribe"


SHUTDOWN_REASON = "the server is shutting down"


def slow_reader_reason(limit: int, stall_timeout: float) -> str:
    return (
        f"the client read too slowly: {limit} bytes of events waited more than "
        f"{stall_timeout:g}s; the task keeps running"
    )


def resubscribe_event(task_id: str, last_event_id: str | None, reason: str) -> dict[str, Any]:
    """The final event of a stream that ends before its task (a slow reader, a shutdown)."""
    after = last_event_id or "0"
    return {
        "event": RESUBSCRIBE_EVENT,
        "data": {
            "timestamp": utc_now_iso(),
            "task_id": task_id,
            "last_event_id": last_event_id,
            "reason": reason,
            "resubscribe": f"/task/events?task_id={task_id}&after={after}",
        },
        "id": None,
    }


def event_record(event: Any, *, parse_data: bool = True) -> dict[str, Any]:
    """The JSON shape of one event in ``show_events`` and task records.

    ``data`` is parsed into an object when ``parse_data`` (``POST /message``), kept as the raw
    JSON text otherwise (``GET /task(s)``), as in the original.
    """
    name, data, ev_id, retry, comment = _event_fields(event)
    if parse_data and isinstance(data, str):
        try:
            data = loads(data)
        except ValueError:
            pass
    elif not parse_data and not isinstance(data, str) and data is not None:
        data = dumps_str(data)
    return {"event": name, "data": data, "id": ev_id, "retry": retry, "comment": comment}
