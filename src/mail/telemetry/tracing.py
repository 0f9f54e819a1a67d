"""OpenTelemetry tracing: off unless the standard ``OTEL_*`` variables ask for an exporter."""

from __future__ import annotations

import contextvars
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span, Tracer

    from mail.telemetry.lean import LeanSpan, LeanTracer

logger = logging.getLogger("mail.telemetry")

_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_capture_content = False
# The span of each task's first run, by task id: later runs, and messages a peer sends back
# after our request returned, join the same trace (bounded; oldest dropped first).
_TASK_ROOTS: OrderedDict[str, Context] = OrderedDict()
_MAX_TASK_ROOTS = 10_000
# Longest ``traceparent`` / ``tracestate`` read from a request (W3C: a version-00 traceparent
# is 55 characters; tracestate at most 32 members, 512 characters recommended).
MAX_TRACEPARENT = 128
MAX_TRACESTATE = 512
MAX_TRACESTATE_MEMBERS = 32
# One W3C tracestate list member (key: simple or tenant@system; value: printable ASCII
# without ',' and '=', not ending in a space).
_STATE_MEMBER = re.compile(
    r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
_PROPAGATOR: Any = None  # the W3C propagator, made when tracing is installed
_DEFAULT_SAMPLER = "parentbased_always_on"
# Set by `install` (the OpenTelemetry modules are imported only when tracing is on).
_KINDS: dict[str, Any] = {}
_trace_api: Any = None
_context_api: Any = None
_lean: LeanTracer | None = None  # set when spans take the lean path
_CURRENT: contextvars.ContextVar[LeanSpan | None] | None = None  # the lean path's current span


def tracer() -> Tracer | None:
    """The installed tracer, or None when tracing is off."""
    return _tracer


def capture_content() -> bool:
    return _capture_content and _tracer is not None


def set_capture_content(value: bool) -> None:
    global _capture_content
    _capture_content = value


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def wanted(env: Mapping[str, str]) -> list[str]:
    """The span exporters the environment asks for (empty: tracing stays off)."""
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return []
    names = env.get("OTEL_TRACES_EXPORTER")
    if names is not None:
        chosen = [n.strip().lower() for n in names.split(",") if n.strip()]
        return [n for n in chosen if n != "none"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return ["otlp"]
    return []


def setup_from_env(service_name: str, env: Mapping[str, str] | None = None) -> bool:
    """Install a tracer exporting where the ``OTEL_*`` variables say; False when off."""
    env = os.environ if env is None else env
    if _truthy(env.get("MAIL_OTEL_CAPTURE_CONTENT")):
        set_capture_content(True)
    names = wanted(env)
    if not names or _tracer is not None:
        return _tracer is not None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    sampler = None  # the SDK builds what OTEL_TRACES_SAMPLER names
    if (env.get("OTEL_TRACES_SAMPLER") or _DEFAULT_SAMPLER).strip().lower() == _DEFAULT_SAMPLER:
        from mail.telemetry.sampler import ParentBasedAlwaysOn

        sampler = ParentBasedAlwaysOn()  # the same decisions, made faster
    provider = TracerProvider(resource=Resource.create(attributes), sampler=sampler)
    for name in names:
        if name == "otlp":
            provider.add_span_processor(_otlp_processor())
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            logger.warning("OTEL_TRACES_EXPORTER: unknown exporter '%s' ignored", name)
    install(provider)
    logger.info("tracing on: exporters %s", ", ".join(names))
    return True


def _otlp_processor() -> SpanProcessor:
    """OTLP/HTTP through the span-encoding batch processor, or the SDK's batch processor
    when this SDK's exporter offers no client to send encoded requests with."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from mail.telemetry.otlp import EncodingBatchProcessor, sender_of

    exporter = OTLPSpanExporter()
    send = sender_of(exporter)
    if send is None:
        logger.info("tracing: this OTLP exporter has no HTTP client to reuse; SDK batching")
        return BatchSpanProcessor(exporter)
    return EncodingBatchProcessor(send, on_shutdown=exporter.shutdown)


def install(provider: TracerProvider, lean: bool = True) -> None:
    """Trace through `provider` (tests pass one with an in-memory exporter); its spans take
    the lean path when `lean` and the provider's pipeline allows (see `mail.telemetry.lean`)."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from mail.version import __version__

    global _tracer, _provider, _PROPAGATOR, _trace_api, _context_api, _lean, _CURRENT
    _PROPAGATOR = TraceContextTextMapPropagator()
    _KINDS.update((kind.name, kind) for kind in SpanKind)
    _trace_api, _context_api = trace, context
    _provider = provider
    _tracer = provider.get_tracer("mail", __version__)
    _lean = _lean_tracer(provider, _tracer) if lean else None
    if _lean is not None:
        from mail.telemetry.lean import CURRENT

        _CURRENT = CURRENT
        logger.info("tracing: lean spans (one OTLP exporter)")


def _lean_tracer(provider: TracerProvider, sdk_tracer: Tracer) -> LeanTracer | None:
    """A lean tracer for `provider`, or None when its spans must be the SDK's."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from mail.telemetry.lean import LeanTracer
    from mail.telemetry.otlp import EncodingBatchProcessor
    from mail.telemetry.sampler import ParentBasedAlwaysOn

    active = getattr(provider, "_active_span_processor", None)
    processors = getattr(active, "_span_processors", None)
    scope = getattr(sdk_tracer, "_instrumentation_scope", None)
    limits = getattr(provider, "_span_limits", None)
    if (
        not isinstance(processors, tuple)
        or len(processors) != 1
        or type(processors[0]) is not EncodingBatchProcessor
        or type(provider.id_generator) is not RandomIdGenerator
        or scope is None
        or limits is None
    ):
        return None
    sampler = None if type(provider.sampler) is ParentBasedAlwaysOn else provider.sampler
    return LeanTracer(processors[0], provider, scope, sampler, limits)


def shutdown() -> None:
    """Flush and stop the exporters; tracing is off afterwards."""
    global _tracer, _provider, _lean
    provider, _provider, _tracer, _lean = _provider, None, None, None
    _TASK_ROOTS.clear()
    if provider is not None:
        provider.shutdown()


# ------------------------------------------------------------------------------------------
# Propagation


def inject(headers: MutableMapping[str, str]) -> None:
    """Add ``traceparent`` (and ``tracestate``) for the current span to `headers`."""
    if _tracer is None:
        return
    if _CURRENT is not None and _lean is not None:
        from mail.telemetry.lean import traceparent

        span = _CURRENT.get()
        if span is not None:
            headers["traceparent"] = traceparent(span)
            if span.trace_state:
                headers["tracestate"] = span.trace_state.to_header()
        return
    _PROPAGATOR.inject(headers)


def extract(headers: Mapping[str, str]) -> Context | None:
    """The remote parent a request's ``traceparent`` names, or None."""
    if _tracer is None:
        return None
    parent = headers.get("traceparent")
    # A caller's header is untrusted: one longer than any valid value is ignored here, quietly
    # (the propagator would log a warning for each, a log flood anyone can cause).
    if parent is None or len(parent) > MAX_TRACEPARENT:
        return None
    carrier = {"traceparent": parent}
    state = headers.get("tracestate")
    if state is not None and len(state) <= MAX_TRACESTATE and _valid_tracestate(state):
        carrier["tracestate"] = state
    context = _PROPAGATOR.extract(carrier)
    if _lean is None:
        return context  # type: ignore[no-any-return]
    from mail.telemetry.lean import LeanSpan

    remote = _trace_api.get_current_span(context).get_span_context()
    if not remote.is_valid:
        return None
    span = LeanSpan(
        remote.trace_id,
        remote.span_id,
        int(remote.trace_flags),
        remote.trace_state or None,
        True,  # remote
        None,  # not recording: a parent only
    )
    return cast("Context", span)


def _valid_tracestate(state: str) -> bool:
    """Whether `state` is a well-formed W3C tracestate. A malformed one is dropped here,
    quietly: OpenTelemetry's parser logs a warning (with the caller's text) for each."""
    keys: set[str] = set()
    for member in state.split(","):
        member = member.strip(" \t")
        if not member:
            continue
        if not _STATE_MEMBER.fullmatch(member):
            return False
        key = member.partition("=")[0]
        if key in keys or len(keys) >= MAX_TRACESTATE_MEMBERS:
            return False
        keys.add(key)
    return True


def context_of(span: Span) -> Context:
    """A context whose current span is `span` (tracing must be on)."""
    if _lean is not None:
        return cast("Context", span)  # a lean span is its own context
    return _trace_api.set_span_in_context(span)  # type: ignore[no-any-return]


def attach(span: Span) -> object:
    """Make `span` the current span until `detach` is called with what this returns."""
    if _CURRENT is not None and _lean is not None:
        return _CURRENT.set(cast("LeanSpan", span))
    return _context_api.attach(_trace_api.set_span_in_context(span))


def detach(token: object) -> None:
    current = _CURRENT
    if current is not None and id(getattr(token, "var", None)) == id(current):
        try:
            current.reset(cast("contextvars.Token[LeanSpan | None]", token))
        except ValueError:  # made in another context: as the SDK's detach, logged, not raised
            logger.warning("tracing: a span was detached in another context than its own")
        return
    _context_api.detach(token)


def remember_task_root(task_id: str, span: Span) -> None:
    _TASK_ROOTS[task_id] = context_of(span)
    _TASK_ROOTS.move_to_end(task_id)
    while len(_TASK_ROOTS) > _MAX_TASK_ROOTS:
        _TASK_ROOTS.popitem(last=False)


def task_root(task_id: str) -> Context | None:
    return _TASK_ROOTS.get(task_id)


def start_span(
    name: str,
    *,
    parent: Context | None = None,
    kind: str = "INTERNAL",
    attributes: Mapping[str, Any] | None = None,
    link: Context | None = None,
) -> Span | None:
    """A started span (None when tracing is off); the caller ends it.

    Under an unsampled local parent this is that parent. `link`: a context the span links
    to without being its child (an untrusted caller's).
    """
    if _tracer is None:
        return None
    lean = _lean
    if lean is not None:
        local = cast("LeanSpan | None", parent)
        if local is None:
            local = _CURRENT.get()  # type: ignore[union-attr]
        if local is not None and not local.flags & 1 and not local.is_remote:
            if local._tracer is None:  # not recording
                return cast("Span", local)
        links = _links(link)
        if links:
            return cast("Span", lean.start(name, local, kind, attributes, links))
        return cast("Span", lean.start(name, local, kind, attributes))
    current = _trace_api.get_current_span(parent)
    context = current.get_span_context()
    if (
        context.is_valid
        and not context.trace_flags.sampled
        and not context.is_remote
        and not current.is_recording()
    ):
        return current  # type: ignore[no-any-return]
    return _tracer.start_span(
        name, context=parent, kind=_KINDS[kind], attributes=attributes, links=_links(link)
    )


def _links(context: Context | None) -> tuple[Any, ...]:
    """The OpenTelemetry links a span gets for `context` (none for no or an invalid one)."""
    if context is None:
        return ()
    if _lean is not None:
        remote: Any = context  # a lean context is its span
    else:
        remote = _trace_api.get_current_span(context).get_span_context()
    if not remote.is_valid:
        return ()
    span_context = _trace_api.SpanContext(
        remote.trace_id,
        remote.span_id,
        is_remote=True,
        trace_flags=_trace_api.TraceFlags(int(remote.trace_flags)),
    )
    return (_trace_api.Link(span_context, {"mail.link": "caller"}),)


def end_span(span: Span | None, error: str | None = None) -> None:
    if span is None:
        return
    if error is not None and span.is_recording():
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
