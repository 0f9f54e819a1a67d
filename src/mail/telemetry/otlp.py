"""Spans to OTLP/HTTP, each encoded as it ends: what `tracing` uses in place of the SDK's
``BatchSpanProcessor`` in front of its OTLP/HTTP exporter."""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import SpanKind

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, Span
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

logger = logging.getLogger("mail.telemetry")

Send = Callable[[bytes], bool]

# ------------------------------------------------------------------------------------------
# Encoding: the protobuf wire format of OTLP's trace messages (opentelemetry/proto/trace/v1),
# written directly. A tag byte is (field number << 3) | wire type (0 varint, 1 fixed64,
# 2 length-delimited, 5 fixed32); the tests decode the result with opentelemetry-proto and
# compare it with what the SDK's own encoder makes of the same spans.

_U64 = struct.Struct("<Q").pack
_U32 = struct.Struct("<I").pack
_F64 = struct.Struct("<d").pack
_MASK64 = (1 << 64) - 1
_TIMES = struct.Struct("<BQBQ").pack  # start and end time fields (tags 0x39, 0x41)
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def _varint(number: int) -> bytes:
    if number < 0x80:
        return _ONE_BYTE[number]
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _framed(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _text(value: str) -> bytes:
    # A lone surrogate (possible in captured content) must not fail the span.
    return value.encode("utf-8", "replace")


def _any_value(value: Any) -> bytes:
    """The fields of an ``AnyValue`` holding `value` (the oneof member is always written)."""
    if isinstance(value, bool):  # before int: bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _framed(b"\x0a", _text(value))
    if isinstance(value, int):
        return b"\x18" + _varint(value & _MASK64)  # int64: two's complement, 10 bytes if < 0
    if isinstance(value, float):
        return b"\x21" + _F64(value)
    if isinstance(value, bytes):
        return _framed(b"\x3a", value)
    if isinstance(value, Sequence):
        return _framed(b"\x2a", b"".join(_framed(b"\x0a", _any_value(v)) for v in value))
    if isinstance(value, Mapping):
        return _framed(b"\x32", _key_values(b"\x0a", value))
    return b""  # None (or a type the SDK does not let through): an empty AnyValue


# Encoded fields of what repeats from span to span: short scalar attributes (an agent's
# name, an operation) with their tags, and names. Bounded: emptied when full.
_CACHE: dict[tuple[Any, ...], bytes] = {}
_CACHE_MAX = 4096


def _cached(key: tuple[Any, ...], encoded: bytes) -> bytes:
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = encoded
    return encoded


_KEY_FIELDS: dict[str, bytes] = {}  # an attribute key's encoded KeyValue.key field
_STR_CACHE: dict[tuple[bytes, str, str], bytes] = {}  # short string attributes, encoded


def _key_field(key: str) -> bytes:
    field = _KEY_FIELDS.get(key)
    if field is None:
        field = _framed(b"\x0a", _text(str(key)))
        if len(_KEY_FIELDS) >= _CACHE_MAX:
            _KEY_FIELDS.clear()
        _KEY_FIELDS[key] = field
    return field


def _key_values(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    """`attributes` as repeated ``KeyValue`` fields with `tag`."""
    if not attributes:
        return b""
    parts: list[bytes] = []
    append = parts.append
    for key, value in attributes.items():
        kind = type(value)
        if kind is str:  # most attributes: written here, without the general path's turns
            short = len(value) <= 64
            if short:
                encoded = _STR_CACHE.get((tag, key, value))
                if encoded is not None:
                    append(encoded)
                    continue
            data = _text(value)
            size = len(data)
            # AnyValue{string_value} inside KeyValue.value (both lengths < 128 most often)
            any_value = (
                b"\x0a" + _ONE_BYTE[size] if size < 0x80 else b"\x0a" + _varint(size)
            ) + data
            pair = _key_field(key) + b"\x12" + _varint(len(any_value)) + any_value
            encoded = tag + _varint(len(pair)) + pair
            if short:
                if len(_STR_CACHE) >= _CACHE_MAX:
                    _STR_CACHE.clear()
                _STR_CACHE[(tag, key, value)] = encoded
            append(encoded)
            continue
        cacheable = kind is int or kind is bool
        if cacheable:
            cache_key = (tag, key, kind, value)  # the type keeps True and 1 apart
            encoded = _CACHE.get(cache_key)
            if encoded is not None:
                append(encoded)
                continue
        pair = _key_field(key) + _framed(b"\x12", _any_value(value))
        encoded = _framed(tag, pair)
        append(_cached(cache_key, encoded) if cacheable else encoded)
    return b"".join(parts)


def _name(tag: bytes, name: str) -> bytes:
    """A span's or event's name field (`tag`), encoded."""
    encoded = _CACHE.get((tag, name))
    if encoded is None:
        encoded = _framed(tag, _text(name))
        if len(name) <= 128:
            _cached((tag, name), encoded)
    return encoded


# OTLP's span flags: bit 8 says whether the parent's remoteness is known, bit 9 that it is.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_LOCAL_PARENT = b"\x85\x01" + _U32(_HAS_IS_REMOTE)  # Span.flags (field 16, fixed32)
_REMOTE_PARENT = b"\x85\x01" + _U32(_HAS_IS_REMOTE | _IS_REMOTE)
# Span.kind (field 6): OTLP counts from SPAN_KIND_UNSPECIFIED = 0, the SDK from INTERNAL = 0.
_KIND_FIELDS = {kind: b"\x30" + _varint(kind.value + 1) for kind in SpanKind}


def encode_span(span: ReadableSpan) -> bytes:
    """One span as the bytes of an OTLP ``Span`` message."""
    context = span.get_span_context()
    assert context is not None  # an SDK span always has one
    parent = span.parent
    parts = [
        b"\x0a\x10"
        + context.trace_id.to_bytes(16, "big")
        + b"\x12\x08"
        + context.span_id.to_bytes(8, "big")
    ]
    if context.trace_state:
        parts.append(_framed(b"\x1a", _text(context.trace_state.to_header())))
    if parent is not None:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    parts += (_name(b"\x2a", span.name), _KIND_FIELDS[span.kind])
    start, end = span.start_time, span.end_time
    if start and end:
        parts.append(_TIMES(0x39, start, 0x41, end))
    elif start or end:
        parts.append(b"\x39" + _U64(start) if start else b"\x41" + _U64(end))
    parts.append(_key_values(b"\x4a", span.attributes))
    if span.dropped_attributes:
        parts += (b"\x50", _varint(span.dropped_attributes))
    for event in span.events:
        body = b"\x09" + _U64(event.timestamp) + _name(b"\x12", event.name)
        body += _key_values(b"\x1a", event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        parts.append(_framed(b"\x5a", body))
    if span.dropped_events:
        parts += (b"\x60", _varint(span.dropped_events))
    for link in span.links:
        linked = link.context
        body = b"\x0a\x10" + linked.trace_id.to_bytes(16, "big")
        body += b"\x12\x08" + linked.span_id.to_bytes(8, "big")
        body += _key_values(b"\x22", link.attributes)
        if link.dropped_attributes:
            body += b"\x28" + _varint(link.dropped_attributes)
        body += b"\x35" + _U32(_HAS_IS_REMOTE | (_IS_REMOTE if linked.is_remote else 0))
        parts.append(_framed(b"\x6a", body))
    if span.dropped_links:
        parts += (b"\x70", _varint(span.dropped_links))
    status = span.status
    code = status.status_code.value
    if code or status.description:
        body = _framed(b"\x12", _text(status.description)) if status.description else b""
        parts.append(_framed(b"\x7a", body + (b"\x18" + _varint(code) if code else b"")))
    else:
        parts.append(b"\x7a\x00")  # an empty (unset) status
    parts.append(_REMOTE_PARENT if parent is not None and parent.is_remote else _LOCAL_PARENT)
    return b"".join(parts)


class _Origin:
    """A resource and instrumentation scope, encoded once: the envelope of their spans."""

    __slots__ = ("resource", "scope", "resource_head", "resource_tail", "scope_head", "scope_tail")

    def __init__(self, resource: Resource, scope: InstrumentationScope | None) -> None:
        # Held: the key of the processor's entry is their id().
        self.resource = resource
        self.scope = scope
        self.resource_head = _framed(b"\x0a", _key_values(b"\x0a", resource.attributes))
        schema = resource.schema_url
        self.resource_tail = _framed(b"\x1a", _text(schema)) if schema else b""
        self.scope_head = self.scope_tail = b""
        if scope is not None:
            body = _framed(b"\x0a", _text(scope.name))
            if scope.version:
                body += _framed(b"\x12", _text(scope.version))
            body += _key_values(b"\x1a", getattr(scope, "attributes", None))
            self.scope_head = _framed(b"\x0a", body)
            if scope.schema_url:
                self.scope_tail = _framed(b"\x1a", _text(scope.schema_url))

    def resource_spans(self, spans: list[bytes]) -> bytes:
        """``ExportTraceServiceRequest.resource_spans`` holding `spans` (encoded ``Span``s)."""
        scope_spans = self.scope_head + b"".join(_framed(b"\x12", s) for s in spans)
        scope_spans += self.scope_tail
        body = self.resource_head + _framed(b"\x12", scope_spans) + self.resource_tail
        return _framed(b"\x0a", body)


def export_request(batch: Sequence[tuple[_Origin, bytes]]) -> bytes:
    """An ``ExportTraceServiceRequest`` holding the encoded spans of `batch`."""
    groups: dict[int, tuple[_Origin, list[bytes]]] = {}
    for origin, data in batch:
        group = groups.get(id(origin))
        if group is None:
            groups[id(origin)] = (origin, [data])
        else:
            group[1].append(data)
    return b"".join(origin.resource_spans(spans) for origin, spans in groups.values())


# ------------------------------------------------------------------------------------------
# The processor


_SHUTDOWN_WAIT = 5.0  # seconds shutdown waits for a send under way


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        logger.warning("%s=%r is not an integer; using %d", name, raw, default)
        return default
    if value <= 0:
        logger.warning("%s=%r must be positive; using %d", name, raw, default)
        return default
    return value


def sender_of(exporter: Any) -> Send | None:
    """A function posting encoded requests through `exporter`'s HTTP client, or None when
    this SDK version's exporter has no such client."""
    client = getattr(exporter, "_client", None)
    export = getattr(client, "export", None)
    if not callable(export):
        return None

    def send(data: bytes) -> bool:
        return bool(getattr(export(data), "success", False))

    return send


class EncodingBatchProcessor(SpanProcessor):
    """Encodes each sampled span when it ends; a thread sends them in batches."""

    def __init__(
        self,
        send: Send,
        *,
        on_shutdown: Callable[[], Any] | None = None,
        schedule_delay_millis: int | None = None,
        max_queue_size: int | None = None,
        max_export_batch_size: int | None = None,
    ) -> None:
        self._send = send
        self._on_shutdown = on_shutdown
        delay = schedule_delay_millis or _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000)
        self._delay = delay / 1000.0
        self._max_queue = max_queue_size or _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self._max_batch = min(
            max_export_batch_size or _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
            self._max_queue,
        )
        self._queue: deque[tuple[_Origin, bytes]] = deque()
        self._origins: dict[tuple[int, int], _Origin] = {}
        self._dropped = 0
        self._sending = 0  # spans of the batch on its way to the receiver
        self._wake = threading.Event()
        self._export_lock = threading.Lock()
        self._closed = False
        self._thread = self._start_thread()
        if hasattr(os, "register_at_fork"):
            # A forked child has the queue but not the thread: it gets its own. (A weak
            # reference: the fork hook must not keep a shut-down processor alive.)
            hook = weakref.WeakMethod(self._after_fork)

            def after_fork() -> None:
                method = hook()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=after_fork)

    def _start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self._work, name="mail-otlp-spans", daemon=True)
        thread.start()
        return thread

    def _after_fork(self) -> None:
        self._queue.clear()
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        if not self._closed:
            self._thread = self._start_thread()

    # -- the span's side: on the thread that ends it -----------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if self._closed or context is None or not context.trace_flags.sampled:
            return
        if len(self._queue) >= self._max_queue:
            self._dropped += 1
            return
        try:
            key = (id(span.resource), id(span.instrumentation_scope))
            origin = self._origins.get(key)
            if origin is None:
                origin = self._origins[key] = _Origin(span.resource, span.instrumentation_scope)
            data = encode_span(span)
        except Exception:  # noqa: BLE001 - ending a span must never fail the caller
            logger.exception("tracing: span '%s' could not be encoded; dropped", span.name)
            return
        self.enqueue(origin, data)

    def enqueue(self, origin: _Origin, data: bytes) -> None:
        """Queue one encoded span (`on_end`'s, or a `mail.telemetry.lean` span's)."""
        if self._closed:
            return
        if len(self._queue) >= self._max_queue:
            self._dropped += 1
            return
        self._queue.append((origin, data))
        if len(self._queue) >= self._max_batch and not self._wake.is_set():
            self._wake.set()

    # -- the exporting thread ----------------------------------------------------------------
    def _work(self) -> None:
        while not self._closed:
            self._wake.wait(self._delay)
            self._wake.clear()
            if not self._closed:
                self._export(everything=False)
        # Closed: the final export runs here, not in `shutdown`, so `shutdown` can stop waiting
        # for a receiver that never answers (each send may take OTEL_EXPORTER_OTLP_TIMEOUT).
        self._export(everything=True)

    def _export(self, everything: bool) -> bool:
        """Send what is queued: full batches, plus one partial batch (all of it when
        `everything`); False if a send failed."""
        ok = True
        with self._export_lock:
            dropped, self._dropped = self._dropped, 0
            if dropped:
                logger.warning(
                    "tracing: %d spans dropped, the export queue was full "
                    "(OTEL_BSP_MAX_QUEUE_SIZE=%d)",
                    dropped,
                    self._max_queue,
                )
            partial_sent = False
            while self._queue:
                if self._closed and not everything:
                    break  # shutting down: the final export (if it can run) sends the rest
                if len(self._queue) < self._max_batch:
                    if partial_sent and not everything:
                        break
                    partial_sent = True
                count = min(len(self._queue), self._max_batch)
                batch = [self._queue.popleft() for _ in range(count)]
                self._sending = count
                try:
                    ok = self._send(export_request(batch)) and ok
                except Exception:  # noqa: BLE001 - the exporter thread must not die
                    logger.exception("tracing: exporting %d spans failed", count)
                    ok = False
                finally:
                    self._sending = 0
        return ok

    # -- SpanProcessor -----------------------------------------------------------------------
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000.0
        ok = self._export(everything=True)
        return ok and time.monotonic() <= deadline

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        # The exporting thread sends what is queued and ends. A receiver that never answers
        # holds it in a send (up to OTEL_EXPORTER_OTLP_TIMEOUT each): exit waits at most
        # _SHUTDOWN_WAIT in all; what is still queued then is lost (the thread is a daemon).
        self._thread.join(timeout=_SHUTDOWN_WAIT)
        if self._thread.is_alive():
            logger.warning(
                "tracing: the OTLP receiver did not answer within %.0f s; %d spans (queued "
                "or being sent) dropped at exit",
                _SHUTDOWN_WAIT,
                len(self._queue) + self._sending,
            )
        if self._on_shutdown is not None:
            self._on_shutdown()  # the exporter stops retrying
