"""A2A event streams (``SendStreamingMessage``, ``SubscribeToTask``) with a slow-reader bound."""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from mail.server.sse import EventStreamResponse, encode_event
from mail.server.stream_buffer import BoundedFrameQueue

PING = b": ping\r\n\r\n"
# JSON-RPC's range for errors an implementation defines (no A2A error says "read faster").
SERVER_ERROR = -32000


def _error_event(error: dict[str, Any]) -> bytes:
    return encode_event({"event": "error", "data": json.dumps(error)})


def _too_slow_reason(settings: Any) -> str:
    return (
        f"the client read this stream too slowly: {settings.sse_max_buffer_bytes} bytes of "
        f"events waited more than {settings.sse_slow_reader_timeout:g}s ([server.settings] "
        "sse_max_buffer_bytes / sse_slow_reader_timeout); the task keeps running: follow it "
        "with SubscribeToTask or GetTask"
    )


SHUTDOWN_REASON = "the server is shutting down: this stream ends here"


def rpc_endings(request_id: Any, settings: Any) -> tuple[bytes, bytes]:
    """The (too slow, shutting down) error events of a JSON-RPC stream for ``request_id``."""

    def frame(message: str) -> bytes:
        error = {"code": SERVER_ERROR, "message": message}
        return _error_event({"jsonrpc": "2.0", "id": request_id, "error": error})

    return frame(_too_slow_reason(settings)), frame(SHUTDOWN_REASON)


def rest_endings(settings: Any) -> tuple[bytes, bytes]:
    """The same for an HTTP+JSON stream, shaped as that binding's errors (google.rpc.Status,
    as the SDK sends an error met mid-stream)."""
    too_slow = {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": _too_slow_reason(settings)}
    shutdown = {"code": 503, "status": "UNAVAILABLE", "message": SHUTDOWN_REASON}
    return _error_event({"error": too_slow}), _error_event({"error": shutdown})


async def _drained(
    source: AsyncIterator[Any], max_bytes: int, ping_interval: float, too_slow: bytes
) -> AsyncIterator[bytes]:
    """The frames of ``source`` (sse-starlette event dicts), read from it as they come."""
    frames: collections.deque[bytes] = collections.deque()
    held = 0
    ready = asyncio.Event()
    outcome: dict[str, Any] = {"done": False, "overflow": False, "error": None}

    async def pull() -> None:
        nonlocal held
        try:
            async for item in source:
                frame = encode_event(item)
                if frames and held + len(frame) > max_bytes:
                    outcome["overflow"] = True
                    break
                frames.append(frame)
                held += len(frame)
                ready.set()
        except Exception as exc:  # noqa: BLE001 - handed to the response, which drops the stream
            outcome["error"] = exc
        finally:
            outcome["done"] = True
            ready.set()
            aclose = getattr(source, "aclose", None)
            if aclose is not None:  # the SDK's subscription ends now, not when collected
                try:
                    await aclose()
                except RuntimeError:
                    pass  # already closing

    puller = asyncio.create_task(pull())
    try:
        while True:
            if frames:
                frame = frames.popleft()
                held -= len(frame)
                yield frame
                continue
            if outcome["done"]:
                break
            ready.clear()
            try:
                async with asyncio.timeout(ping_interval):
                    await ready.wait()
            except TimeoutError:
                yield PING
        if outcome["error"] is not None:
            raise outcome["error"]
        if outcome["overflow"]:
            yield too_slow
    finally:
        puller.cancel()
        await asyncio.gather(puller, return_exceptions=True)


def bounded_stream(
    sdk_response: Response, endings: tuple[bytes, bytes], state: Any, slot: Any
) -> EventStreamResponse | None:
    """The SDK's event-stream response re-served with the bound (None: not an event stream,
    e.g. the error the SDK answers instead of a stream). ``endings``: the error events that
    end it when its client is too slow and when the server shuts down (``rpc_endings``,
    ``rest_endings``)."""
    source = getattr(sdk_response, "body_iterator", None)
    if source is None or "text/event-stream" not in (sdk_response.media_type or ""):
        return None
    settings = state.config.settings
    limit = settings.sse_max_buffer_bytes
    stall = settings.sse_slow_reader_timeout
    too_slow, shutdown = endings
    queue = BoundedFrameQueue(
        _drained(source, limit, settings.sse_ping_interval, too_slow),
        lambda frame: frame,
        limit,
        lambda _last_id: too_slow,
        stall,
    )
    return EventStreamResponse(queue, lambda _last_id: shutdown, state.open_streams, slot)
