"""Incremental parser for `text/event-stream` bodies.

The parser follows the WHATWG event-stream rules: lines end with CRLF, LF or CR (a CR at
the end of one chunk followed by an LF at the start of the next is one line ending); a
blank line dispatches the event being built; `data` lines are joined with `\\n`; `:` lines
are comments; `retry` must be all digits. Events are produced as soon as their blank line
has been fed, so a consumer sees each event when its frame arrives, not when the stream ends.

Events are `sse_starlette.ServerSentEvent` objects, the same class the server uses, so code
written against either side reads `.event`, `.data`, `.id`, `.retry` and `.comment`.
"""

from __future__ import annotations

import codecs
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sse_starlette import ServerSentEvent

logger = logging.getLogger("mail.client")

DEFAULT_EVENT_NAME = "message"

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
        index = start
        while index < length:
            char = text[index]
            if char == "\r" or char == "\n":
                self._line_buffer.append(text[start:index])
                line = "".join(self._line_buffer)
                self._line_buffer.clear()
                produced = self._process_line(line)
                if produced is not None:
                    events.append(produced)
                if char == "\r":
                    if index + 1 < length:
                        if text[index + 1] == "\n":
                            index += 1
                    else:
                        self._skip_leading_lf = True
                start = index + 1
            index += 1
        if start < length:
            self._line_buffer.append(text[start:])
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
