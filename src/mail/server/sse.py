"""Server-sent events: framing of runtime events and the streaming response.

The runtime's ``stream_message`` yields ``ServerSentEvent``-like objects (``.event``, ``.data``,
``.id``, optionally ``.retry``/``.comment``). We frame them ourselves (CRLF line endings, one
``data:`` line per line of data) instead of going through sse-starlette's response class, which
adds a task group and its own pinger per stream; the runtime already sends ``ping`` events.

When the client goes away, Starlette cancels the body iterator; the runtime's generator must
treat that as "stop watching", never as "cancel the task" (the task keeps running and its
result stays available through ``GET /task``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from mail.server.jsonio import dumps_str, loads
from mail.server.stream_shutdown import OpenStreams

logger = logging.getLogger("mail.server.sse")

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}
_SEP = "\r\n"


def _data_text(data: Any) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return dumps_str(data)


def encode_event(event: Any) -> bytes:
    """One SSE frame for an event object or a ``{"event","data","id"}`` dict."""
    if isinstance(event, dict):
        name, data, ev_id = event.get("event"), event.get("data"), event.get("id")
        retry, comment = event.get("retry"), event.get("comment")
    else:
        name, data, ev_id = (
            getattr(event, "event", None),
            getattr(event, "data", None),
            getattr(event, "id", None),
        )
        retry, comment = getattr(event, "retry", None), getattr(event, "comment", None)
    parts: list[str] = []
    if comment:
        parts.extend(f": {line}" for line in str(comment).splitlines())
    if ev_id is not None:
        parts.append(f"id: {ev_id}")
    if name:
        parts.append(f"event: {name}")
    text = _data_text(data)
    for line in text.splitlines() or [""]:
        parts.append(f"data: {line}")
    if retry is not None:
        parts.append(f"retry: {int(retry)}")
    return (_SEP.join(parts) + _SEP + _SEP).encode("utf-8")


async def _frames(events: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield encode_event(event)
    finally:
        # Close the runtime's generator promptly so its subscription is dropped now,
        # not whenever the garbage collector gets to it.
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except RuntimeError:
                # Already running/closing (the cancellation path); nothing left to release.
                pass


def event_stream_response(
    events: AsyncIterator[Any],
    *,
    max_buffer_bytes: int | None = None,
    stall_timeout: float = 5.0,
    task_id: str | None = None,
    streams: OpenStreams | None = None,
) -> StreamingResponse:
    """An SSE response; with ``max_buffer_bytes``, a slow reader is asked to resubscribe.

    See :mod:`mail.server.stream_buffer`: when the bound stays reached for ``stall_timeout``
    seconds the stream ends with ``event: resubscribe`` naming the last event id it carried
    for ``task_id``. With ``streams``, the stream ends the same way when the server starts to
    shut down (:mod:`mail.server.stream_shutdown`).
    """
    if streams is not None:
        events = streams.until_closing(
            events, lambda last_id: resubscribe_event(task_id or "", last_id, SHUTDOWN_REASON)
        )
    if max_buffer_bytes is None:
        body: AsyncIterator[bytes] = _frames(events)
    else:
        from mail.server.stream_buffer import BoundedFrameQueue

        queue = BoundedFrameQueue(
            events,
            encode_event,
            max_buffer_bytes,
            lambda last_id: resubscribe_event(
                task_id or "", last_id, slow_reader_reason(max_buffer_bytes, stall_timeout)
            ),
            stall_timeout,
        )
        body = queue.frames()
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


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
            "timestamp": _utc_now_iso(),
            "task_id": task_id,
            "last_event_id": last_event_id,
            "reason": reason,
            "resubscribe": f"/task/events?task_id={task_id}&after={after}",
        },
        "id": None,
    }


def _utc_now_iso() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat()


def event_record(event: Any, *, parse_data: bool = True) -> dict[str, Any]:
    """The JSON shape of one event in ``show_events`` and task records.

    ``data`` is parsed into an object when ``parse_data`` (``POST /message``), kept as the raw
    JSON text otherwise (``GET /task(s)``), as in the original.
    """
    if isinstance(event, dict):
        name, data, ev_id = event.get("event"), event.get("data"), event.get("id")
        retry, comment = event.get("retry"), event.get("comment")
    else:
        name, data, ev_id = (
            getattr(event, "event", None),
            getattr(event, "data", None),
            getattr(event, "id", None),
        )
        retry, comment = getattr(event, "retry", None), getattr(event, "comment", None)
    if parse_data and isinstance(data, str):
        try:
            data = loads(data)
        except ValueError:
            pass
    elif not parse_data and not isinstance(data, str) and data is not None:
        data = dumps_str(data)
    return {"event": name, "data": data, "id": ev_id, "retry": retry, "comment": comment}
