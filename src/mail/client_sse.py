"""Reading `text/event-stream` answers: an incremental parser and the stream object."""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from sse_starlette import ServerSentEvent

logger = logging.getLogger("mail.client")

DEFAULT_EVENT_NAME = "message"
_LINE_END = re.compile(r"\r\n?|\n")

_event_class: Any = None


def make_event(
    data: str | None,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
    comment: str | None = None,
) -> ServerSentEvent:
    """Build a ServerSentEvent; sse_starlette (and starlette) are imported on first use only."""
    global _event_class
    if _event_class is None:
        from sse_starlette import ServerSentEvent as event_class

        _event_class = event_class
    return _event_class(data, event=event, id=id, retry=retry, comment=comment)  # type: ignore[no-any-return]


@dataclass
class _PendingEvent:
    data_lines: list[str] = field(default_factory=list)
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    comments: list[str] = field(default_factory=list)

    def has_payload(self) -> bool:
        # A block holding only comments (keep-alives) or only an id/retry is not an event.
        return bool(self.data_lines) or self.event is not None


class SSEParser:
    """Feed decoded text in arbitrary chunks; get back the events completed by each chunk."""

    def __init__(self) -> None:
        self._line_buffer: list[str] = []
        self._pending = _PendingEvent()
        self._skip_leading_lf = False
        self._at_stream_start = True
        self.last_event_id: str | None = None
        self.retry: int | None = None

    def feed(self, text: str) -> list[ServerSentEvent]:
        if self._at_stream_start and text:
            self._at_stream_start = False
            if text.startswith("\ufeff"):
                text = text[1:]
        events: list[ServerSentEvent] = []
        start = 0
        length = len(text)
        if self._skip_leading_lf and length:
            # The previous chunk ended with CR; an LF right here belongs to that line ending.
            if text[0] == "\n":
                start = 1
            self._skip_leading_lf = False
        buffer = self._line_buffer
        for ending in _LINE_END.finditer(text, start):
            # Line endings are found by the regex engine, not a Python loop per character.
            end = ending.start()
            if buffer:
                buffer.append(text[start:end])
                line = "".join(buffer)
                buffer.clear()
            else:
                line = text[start:end]
            produced = self._process_line(line)
            if produced is not None:
                events.append(produced)
            start = ending.end()
            if start == length and text[end] == "\r" and start - end == 1:
                self._skip_leading_lf = True  # a CR ending this chunk: an LF may follow
        if start < length:
            buffer.append(text[start:])
        return events

    def close(self) -> list[ServerSentEvent]:
        """End of stream: dispatch a final event whose terminating blank line never came."""
        if self._line_buffer:
            logger.debug("discarding unterminated SSE line at end of stream")
            self._line_buffer.clear()
        pending, self._pending = self._pending, _PendingEvent()
        if pending.has_payload():
            return [self._build(pending)]
        return []

    def _process_line(self, line: str) -> ServerSentEvent | None:
        if line == "":
            pending, self._pending = self._pending, _PendingEvent()
            if pending.has_payload():
                return self._build(pending)
            return None
        if line.startswith(":"):
            self._pending.comments.append(_strip_one_space(line[1:]))
            return None
        name, colon, value = line.partition(":")
        value = _strip_one_space(value) if colon else ""
        if name == "data":
            self._pending.data_lines.append(value)
        elif name == "event":
            self._pending.event = value
        elif name == "id":
            if "\0" not in value:
                self._pending.id = value
                self.last_event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._pending.retry = int(value)
                self.retry = self._pending.retry
        else:
            logger.debug("ignoring unknown SSE field %r", name)
        return None

    @staticmethod
    def _build(pending: _PendingEvent) -> ServerSentEvent:
        data = "\n".join(pending.data_lines) if pending.data_lines else None
        comment = "\n".join(pending.comments) if pending.comments else None
        return make_event(
            data,
            event=pending.event or DEFAULT_EVENT_NAME,
            id=pending.id,
            retry=pending.retry,
            comment=comment,
        )


def _strip_one_space(value: str) -> str:
    return value[1:] if value.startswith(" ") else value


class IncrementalSSEDecoder:
    """Bytes in, events out: UTF-8 decoding that tolerates characters split across chunks."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.parser = SSEParser()

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        return self.parser.feed(self._decoder.decode(chunk))

    def close(self) -> list[ServerSentEvent]:
        tail = self._decoder.decode(b"", final=True)
        events = self.parser.feed(tail) if tail else []
        return events + self.parser.close()


BODY_PREVIEW_CHARS = 300


def preview(text: str) -> str:
    """The start of a (possibly huge) body, for error messages."""
    text = text.strip()
    if len(text) > BODY_PREVIEW_CHARS:
        return text[:BODY_PREVIEW_CHARS] + f"... [{len(text) - BODY_PREVIEW_CHARS} more chars]"
    return text


def describe_error(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, TimeoutError) and not text:
        return "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class MAILEventStream:
    """An SSE answer (POST /message with stream=true): async-iterable, awaitable, and an
    async context manager.

    `open_response` sends the request and returns the response once its status is known to
    be good; it runs on the first await or iteration, so HTTP errors surface there.
    """

    def __init__(
        self, open_response: Callable[[], Awaitable[aiohttp.ClientResponse]], label: str
    ) -> None:
        self._open_response = open_response
        self._label = label
        self._response: aiohttp.ClientResponse | None = None
        self._iterator: AsyncGenerator[ServerSentEvent, None] | None = None
        self._decoder = IncrementalSSEDecoder()

    @property
    def last_event_id(self) -> str | None:
        return self._decoder.parser.last_event_id

    @property
    def webhook(self) -> dict[str, Any] | None:
        """The message's own webhook as the server named it in the stream's headers
        (``MAIL-Webhook-Id`` / ``MAIL-Webhook-Secret``): ``{"id", "secret"}``, the secret None
        when you chose it. None before the stream is open, and for a message without one."""
        headers = self._response.headers if self._response is not None else {}
        hook_id = headers.get("MAIL-Webhook-Id")
        if hook_id is None:
            return None
        return {"id": hook_id, "secret": headers.get("MAIL-Webhook-Secret")}

    async def open(self) -> MAILEventStream:
        if self._response is None:
            response = await self._open_response()
            self._response = response
            content_type = response.headers.get("Content-Type", "")
            if not content_type.startswith("text/event-stream"):
                try:
                    body = await response.text()
                finally:
                    response.release()
                raise ValueError(
                    f"expected an event stream from {self._label} but got content type "
                    f"{content_type!r}; body: {preview(body) or '(empty)'}"
                )
        return self

    def __await__(self) -> Generator[Any, None, MAILEventStream]:
        return self.open().__await__()

    def __aiter__(self) -> AsyncGenerator[ServerSentEvent, None]:
        if self._iterator is None:
            self._iterator = self._events()
        return self._iterator

    async def __aenter__(self) -> MAILEventStream:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop reading; the server keeps running the task."""
        if self._iterator is not None:
            await self._iterator.aclose()
        if self._response is not None:
            self._response.close()

    async def _events(self) -> AsyncGenerator[ServerSentEvent, None]:
        await self.open()
        response = self._response
        assert response is not None
        try:
            try:
                async for chunk in response.content.iter_any():
                    for event in self._decoder.feed(chunk):
                        yield event
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise RuntimeError(
                    f"MAIL client stream failed: {self._label}: {describe_error(exc)}"
                ) from exc
            for event in self._decoder.close():
                yield event
        finally:
            # close() rather than release(): a half-read stream must not go back to the pool.
            response.close()
