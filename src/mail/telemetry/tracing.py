"""OpenTelemetry tracing: off unless the standard ``OTEL_*`` variables ask for an exporter.

`setup_from_env` (called once at server start) installs a tracer when
``OTEL_TRACES_EXPORTER`` names one (``otlp``, ``console``) or an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true``
or ``OTEL_TRACES_EXPORTER=none`` keep it off. The OTLP exporter is OTLP/HTTP (protobuf) and
reads its own ``OTEL_EXPORTER_OTLP_*`` settings; spans leave through a batch processor
(``OTEL_BSP_*``) that encodes each span as it ends (`mail.telemetry.otlp`). While no tracer is
installed every helper here returns at its first line, so tracing costs nothing when off.

Sampling is the SDK's (``OTEL_TRACES_SAMPLER``); the default, ``parentbased_always_on``, is
decided by `mail.telemetry.sampler` (same decisions, less work per span). A span
whose parent is a local span that was not sampled is not made at all: `start_span` hands back
the parent itself (a non-recording span, whose methods do nothing), since under every sampler
the SDK ships such a child would not be sampled either. So an unsampled request costs one
sampling decision, not one per span.

Message content (prompts, replies, tool arguments) is never put on spans unless
``MAIL_OTEL_CAPTURE_CONTENT=true`` (or ``[server.telemetry] capture_content``) says so.
W3C ``traceparent`` / ``tracestate`` headers carry the trace across interswarm requests.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span, Tracer

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
_PROPAGATOR: Any = None  # the W3C propagator, made when tracing is installed
_DEFAULT_SAMPLER = "parentbased_always_on"
# Set by `install` (the OpenTelemetry modules are imported only when tracing is on).
_KINDS: dict[str, Any] = {}
_trace_api: Any = None
_context_api: Any = None


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


def install(provider: TracerProvider) -> None:
    """Trace through `provider` (tests pass one with an in-memory exporter)."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from mail.version import __version__

    global _tracer, _provider, _PROPAGATOR, _trace_api, _context_api
    _PROPAGATOR = TraceContextTextMapPropagator()
    _KINDS.update((kind.name, kind) for kind in SpanKind)
    _trace_api, _context_api = trace, context
    _provider = provider
    _tracer = provider.get_tracer("mail", __version__)


def shutdown() -> None:
    """Flush and stop the exporters; tracing is off afterwards."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    _TASK_ROOTS.clear()
    if provider is not None:
        provider.shutdown()


# ------------------------------------------------------------------------------------------
# Propagation


def inject(headers: MutableMapping[str, str]) -> None:
    """Add ``traceparent`` (and ``tracestate``) for the current span to `headers`."""
    if _tracer is None:
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
    if state is not None and len(state) <= MAX_TRACESTATE:
        carrier["tracestate"] = state
    return _PROPAGATOR.extract(carrier)


def context_of(span: Span) -> Context:
    """A context whose current span is `span` (tracing must be on)."""
    return _trace_api.set_span_in_context(span)  # type: ignore[no-any-return]


def attach(span: Span) -> object:
    """Make `span` the current span until `detach` is called with what this returns."""
    return _context_api.attach(_trace_api.set_span_in_context(span))


def detach(token: object) -> None:
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
) -> Span | None:
    """A started span (None when tracing is off); the caller ends it.

    Under a local parent that was not sampled this is that parent (see the module's doc).
    """
    if _tracer is None:
        return None
    current = _trace_api.get_current_span(parent)
    context = current.get_span_context()
    if (
        context.is_valid
        and not context.trace_flags.sampled
        and not context.is_remote
        and not current.is_recording()
    ):
        return current  # type: ignore[no-any-return]
    return _tracer.start_span(name, context=parent, kind=_KINDS[kind], attributes=attributes)


def end_span(span: Span | None, error: str | None = None) -> None:
    if span is None:
        return
    if error is not None and span.is_recording():
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
