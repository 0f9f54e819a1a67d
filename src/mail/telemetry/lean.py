"""The lean span path: spans as small slotted records, used when the only span pipeline is
the OTLP exporter behind `mail.telemetry.otlp`'s encoding processor (the setup the ``OTEL_*``
variables make)."""

from __future__ import annotations

import contextvars
import logging
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.attributes import _clean_attribute_value as _sdk_clean
from opentelemetry.trace import SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from mail.telemetry.otlp import _Origin, encode_span

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.sampling import Sampler
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace.span import TraceState

    from mail.telemetry.otlp import EncodingBatchProcessor

logger = logging.getLogger("mail.telemetry")

_SAMPLED = 0x01  # W3C trace flags
_RANDOM_TRACE_ID = 0x02
_UNSET = Status(StatusCode.UNSET)
_KINDS = {kind.name: kind for kind in SpanKind}
_PLAIN_NOT_STR = frozenset((bool, int, float, bytes, type(None)))
_PLAIN = _PLAIN_NOT_STR | {str}  # attribute values kept as they are
_time_ns = time.time_ns
_bits = random.getrandbits


def _new_id(bits: int) -> int:
    value = _bits(bits)
    while value == 0:  # the invalid id: drawn again, as the SDK does
        value = _bits(bits)
    return value


class LeanEvent:
    __slots__ = ("name", "timestamp", "attributes", "dropped_attributes")

    def __init__(self, name: str, timestamp: int, attributes: dict[str, Any], dropped: int):
        self.name = name
        self.timestamp = timestamp
        self.attributes = attributes
        self.dropped_attributes = dropped


class LeanSpan:
    """A span (or, not recording, a span context: a remote parent, an unsampled span): the
    methods `mail.telemetry` calls on a span, and what `encode_span` reads. It is its own
    span context (``get_span_context()`` is the span)."""

    __slots__ = (
        "name",
        "trace_id",
        "span_id",
        "flags",
        "trace_state",
        "is_remote",
        "parent",
        "kind",
        "start_time",
        "end_time",
        "attributes",
        "events",
        "dropped_attributes",
        "dropped_events",
        "status",
        "_tracer",
    )
    name: str
    trace_id: int
    span_id: int
    flags: int
    trace_state: TraceState | None
    is_remote: bool
    parent: LeanSpan | None
    kind: SpanKind
    start_time: int
    end_time: int
    attributes: dict[str, Any]
    events: list[LeanEvent]
    dropped_attributes: int
    dropped_events: int
    status: Status
    links: tuple[()] = ()
    dropped_links = 0
    is_valid = True

    def __init__(
        self,
        trace_id: int,
        span_id: int,
        flags: int,
        trace_state: TraceState | None,
        is_remote: bool,
        tracer: LeanTracer | None,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags
        self.trace_state = trace_state
        self.is_remote = is_remote
        self._tracer = tracer  # None: not recording

    # -- the span context's side ---------------------------------------------------------
    def get_span_context(self) -> LeanSpan:
        return self

    @property
    def trace_flags(self) -> TraceFlags:
        return TraceFlags(self.flags)

    @property
    def context(self) -> LeanSpan:
        return self

    # -- the span's side -----------------------------------------------------------------
    def is_recording(self) -> bool:
        return self._tracer is not None

    def set_attribute(self, key: str, value: Any) -> None:
        tracer = self._tracer
        if tracer is None:
            return
        if type(key) is not str or not key:  # as the SDK: dropped, counted
            self.dropped_attributes += 1
            return
        cleaned = value if type(value) in tracer.plain else tracer.clean(value)
        attributes = self.attributes
        if key in attributes:
            del attributes[key]  # set again: it moves to the end, as in the SDK
        elif len(attributes) >= tracer.max_attributes:
            self.dropped_attributes += 1
            if not attributes:  # a limit of 0
                return
            del attributes[next(iter(attributes))]  # the oldest goes, as in the SDK
        attributes[key] = cleaned

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def update_name(self, name: str) -> None:
        if self._tracer is not None:
            self.name = name

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        tracer = self._tracer
        if tracer is None:
            return
        if len(self.events) >= tracer.max_events:
            del self.events[0]  # the oldest goes, as in the SDK
            self.dropped_events += 1
        kept, dropped = tracer.bounded(attributes, tracer.max_event_attributes)
        self.events.append(LeanEvent(name, timestamp or _time_ns(), kept, dropped))

    def set_status(self, status: Status) -> None:
        if self._tracer is not None and status.status_code is not StatusCode.UNSET:
            self.status = status

    def end(self, end_time: int | None = None) -> None:
        tracer = self._tracer
        if tracer is None:
            return
        self._tracer = None  # ended: no longer recording
        self.end_time = end_time or _time_ns()
        tracer.finish(self)
        # What only the encoding needed goes now; the span may live on as a parent.
        self.parent = self.attributes = self.events = None  # type: ignore[assignment]


class LinkedLeanSpan(LeanSpan):
    """A lean span with links (OpenTelemetry ``Link``s): rare, so the plain one has none."""

    __slots__ = ("links",)  # type: ignore[assignment]


class LeanTracer:
    """Makes `LeanSpan`s for one encoding processor, resource and instrumentation scope."""

    def __init__(
        self,
        processor: EncodingBatchProcessor,
        provider: TracerProvider,
        scope: InstrumentationScope,
        sampler: Sampler | None,
        limits: SpanLimits,
    ) -> None:
        self.processor = processor
        self.provider = provider
        self.scope = scope
        self.origin = _Origin(provider.resource, scope)
        self.sampler = sampler  # None: parentbased_always_on, decided inline
        self.max_attributes = _limit(limits.max_span_attributes)
        self.max_events = _limit(limits.max_events)
        self.max_event_attributes = _limit(limits.max_event_attributes)
        self.max_length = limits.max_attribute_length
        # Values kept as they are (the common case); others go through `clean`.
        self.plain = _PLAIN if self.max_length is None else _PLAIN_NOT_STR

    def start(
        self,
        name: str,
        parent: LeanSpan | None,
        kind: str,
        attributes: Mapping[str, Any] | None,
        links: tuple[Any, ...] = (),
    ) -> LeanSpan:
        if parent is None:
            trace_id = _new_id(128)
            flags = _RANDOM_TRACE_ID  # the SDK's id generator draws random trace ids
        else:
            trace_id = parent.trace_id
            flags = parent.flags & _RANDOM_TRACE_ID
        sampler = self.sampler
        if sampler is None:
            sampled = parent is None or bool(parent.flags & _SAMPLED)
            recording = sampled
            state = parent.trace_state if parent is not None else None
            kept, dropped = self.bounded(attributes, self.max_attributes) if sampled else ({}, 0)
        else:
            result = sampler.should_sample(
                _otel_context(parent), trace_id, name, _KINDS[kind], attributes
            )
            sampled = result.decision.is_sampled()
            recording = result.decision.is_recording()
            state = result.trace_state
            kept, dropped = self.bounded(result.attributes, self.max_attributes)
        span = (LinkedLeanSpan if links else LeanSpan)(
            trace_id,
            _new_id(64),
            flags | _SAMPLED if sampled else flags,
            state,
            False,
            self if recording else None,
        )
        if links:
            span.links = links  # type: ignore[misc]
        if recording:
            span.name = name
            span.parent = parent
            span.kind = _KINDS[kind]
            span.attributes = kept
            span.events = []
            span.dropped_attributes = dropped
            span.dropped_events = 0
            span.status = _UNSET
            span.start_time = _time_ns()
        return span

    def finish(self, span: LeanSpan) -> None:
        if span.flags & _SAMPLED:
            try:
                data = encode_span(span)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - ending a span must never fail the caller
                logger.exception("tracing: span '%s' could not be encoded; dropped", span.name)
                return
            origin = self.origin
            if origin.resource is not self.provider.resource:  # the SDK renews it after a fork
                origin = self.origin = _Origin(self.provider.resource, self.scope)
            self.processor.enqueue(origin, data)

    # -- attributes, within the limits -----------------------------------------------------
    def clean(self, value: Any) -> Any:
        """`value` as the SDK keeps it (its own cleaning: long strings cut to the length
        limit, sequences copied to tuples, mappings copied, other types made strings)."""
        return _sdk_clean(value, self.max_length)

    def bounded(
        self, attributes: Mapping[str, Any] | None, limit: int
    ) -> tuple[dict[str, Any], int]:
        """`attributes` within `limit` (the oldest dropped first), and how many were dropped,
        as the SDK's bounded attributes keep them."""
        kept: dict[str, Any] = {}
        dropped = 0
        if attributes:
            plain = self.plain
            for key, value in attributes.items():
                if type(key) is not str or not key:
                    dropped += 1
                    continue
                if len(kept) >= limit:
                    dropped += 1
                    if not kept:  # a limit of 0
                        continue
                    del kept[next(iter(kept))]
                kept[key] = value if type(value) in plain else self.clean(value)
        return kept, dropped


def _limit(value: int | None) -> int:
    return value if value is not None else 1 << 62


def _otel_context(parent: LeanSpan | None) -> Any:
    """An OpenTelemetry context holding `parent`'s span context (for a sampler's question)."""
    if parent is None:
        return None
    from opentelemetry import trace

    context = trace.SpanContext(
        parent.trace_id,
        parent.span_id,
        is_remote=parent.is_remote,
        trace_flags=TraceFlags(parent.flags),
        trace_state=parent.trace_state,
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(context))


# The current span of the lean path (the SDK path keeps it in OpenTelemetry's context).
CURRENT: contextvars.ContextVar[LeanSpan | None] = contextvars.ContextVar(
    "mail_lean_span", default=None
)


def traceparent(span: LeanSpan) -> str:
    return f"00-{span.trace_id:032x}-{span.span_id:016x}-{span.flags & 0xFF:02x}"
