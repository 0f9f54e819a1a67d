"""What keeps tracing cheap: the span-encoding OTLP batch processor (what it sends decodes as
the SDK's own encoder writes it, batches and the queue bound follow OTEL_BSP_*, the server uses
it), the default sampler (the SDK's decisions), and children of unsampled spans not made."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    ParentBased,
    ParentBasedTraceIdRatio,
    StaticSampler,
)
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import TraceState
from tests.support.otlp_receiver import OTLPReceiver

from mail.telemetry import otlp, tracing
from mail.telemetry.sampler import ParentBasedAlwaysOn


class Sent:
    """A `send` for the processor: keeps each request it is given, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.arrived = threading.Event()

    def __call__(self, data: bytes) -> bool:
        request = ExportTraceServiceRequest()
        request.ParseFromString(data)
        self.requests.append(request)
        self.arrived.set()
        return True

    def spans(self) -> list[tuple[dict[str, object], str, str, object]]:
        return flatten(self.requests)


def flatten(requests: list[ExportTraceServiceRequest]) -> list[tuple]:  # type: ignore[type-arg]
    """(resource attributes, scope name, scope version, span) for every span, by span id."""
    found = []
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        (resource, scope_spans.scope.name, scope_spans.scope.version, span)
                    )
    return sorted(found, key=lambda entry: entry[3].span_id)


def _provider(
    processor: otlp.EncodingBatchProcessor,
) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "otlp-test"}))
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def test_what_is_sent_decodes_as_the_sdk_encoder_writes_it() -> None:
    sent = Sent()
    provider, memory = _provider(otlp.EncodingBatchProcessor(sent, schedule_delay_millis=60_000))
    tracer = provider.get_tracer("mail", "9.9.9")
    remote = TraceContextTextMapPropagator().extract(
        {
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "tracestate": "vendor=abc,other=1",
        }
    )
    values = {
        "text": "é ünïcode",
        "count": 3,
        "negative": -7,
        "ratio": 0.25,
        "flag": True,
        "names": ["a", "b"],
        "numbers": [1, 2, 3],
        "big": 2**62,
        "long": "x" * 300,  # longer than what is cached
        "raw": b"\x00\xff",
        "nothing": None,
        "nested": {"a": 1, "b": ["x", None], "c": {"d": 0.5}},
    }
    with tracer.start_as_current_span("server", context=remote, kind=SpanKind.SERVER) as server:
        server.set_attributes(values)
        with tracer.start_as_current_span(
            "chat model", kind=SpanKind.CLIENT, links=[Link(server.get_span_context(), {"k": 1})]
        ) as child:
            child.add_event("execute_tool send_request", {"gen_ai.tool.name": "send_request"})
            child.add_event("bare")
            child.set_status(Status(StatusCode.ERROR, "it broke"))
    tracer.start_span("root, no attributes").end()
    tracer.start_span("again", attributes=values).end()  # encoded from the cache
    tracer.start_span("true", attributes={"k": True}).end()
    tracer.start_span("one", attributes={"k": 1}).end()  # equal to True, not the same
    provider.force_flush()
    finished: tuple[ReadableSpan, ...] = memory.get_finished_spans()
    assert len(finished) == 6
    expected = flatten([encode_spans(finished)])
    got = sent.spans()
    assert [entry[3] for entry in got] == [entry[3] for entry in expected]
    assert [entry[:3] for entry in got] == [entry[:3] for entry in expected]
    assert got[0][0]["service.name"] == "otlp-test" and got[0][1:3] == ("mail", "9.9.9")
    provider.shutdown()


def test_batches_follow_the_batch_size_and_a_full_queue_drops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    inside = threading.Event()
    sizes: list[int] = []

    def send(data: bytes) -> bool:
        inside.set()
        release.wait(30)  # the first export holds the thread while spans pile up
        request = ExportTraceServiceRequest()
        request.ParseFromString(data)
        sizes.append(len(flatten([request])))
        return True

    processor = otlp.EncodingBatchProcessor(
        send, schedule_delay_millis=60_000, max_queue_size=10, max_export_batch_size=4
    )
    provider, _memory = _provider(processor)
    tracer = provider.get_tracer("mail")
    for number in range(4):  # a full batch wakes the thread, which blocks in send
        tracer.start_span(f"first {number}").end()
    assert inside.wait(10)
    for number in range(15):  # 10 fit in the queue, 5 are dropped
        tracer.start_span(f"then {number}").end()
    release.set()
    with caplog.at_level(logging.WARNING, logger="mail.telemetry"):
        assert provider.force_flush()
    assert sum(sizes) == 4 + 10 and max(sizes) <= 4, sizes
    assert "5 spans dropped" in caplog.text
    provider.shutdown()


def test_otel_bsp_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "3")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    sent = Sent()
    provider, _memory = _provider(otlp.EncodingBatchProcessor(sent))
    tracer = provider.get_tracer("mail")
    tracer.start_span("alone").end()
    # Sent within the 50 ms schedule delay, without a flush (the default is 5 s).
    assert sent.arrived.wait(3)
    for number in range(7):
        tracer.start_span(f"more {number}").end()
    provider.force_flush()
    sizes = [len(flatten([request])) for request in sent.requests]
    assert sum(sizes) == 8 and max(sizes) <= 3, sizes
    provider.shutdown()


def test_shutdown_sends_what_is_queued() -> None:
    sent = Sent()
    provider, _memory = _provider(otlp.EncodingBatchProcessor(sent, schedule_delay_millis=60_000))
    provider.get_tracer("mail").start_span("last words").end()
    assert not sent.requests
    provider.shutdown()
    assert [entry[3].name for entry in sent.spans()] == ["last words"]


@pytest.fixture
def no_tracer() -> Iterator[None]:
    tracing.shutdown()
    yield
    tracing.shutdown()


def test_the_server_setup_sends_through_the_exporters_client(
    no_tracer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the locked SDK the exporter has the client this processor posts through; an
    # upgrade that removes it would quietly fall back to the slower SDK batching.
    assert otlp.sender_of(OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")) is not None
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)  # the exporter's
        assert tracing.setup_from_env("setup")
        provider = tracing._provider
        assert provider is not None
        processors = provider._active_span_processor._span_processors
        assert [type(p) for p in processors] == [otlp.EncodingBatchProcessor]
        span = tracing.start_span("over real OTLP/HTTP", kind="CLIENT")
        tracing.end_span(span)
        tracing.shutdown()  # flushes
        [received] = receiver.wait_for(lambda spans: len(spans) == 1, timeout=10)
    assert received.name == "over real OTLP/HTTP"
    assert received.trace_id == format(span.get_span_context().trace_id, "032x")  # type: ignore[union-attr]


def test_an_exporter_without_a_client_falls_back_to_sdk_batching(
    no_tracer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert otlp.sender_of(object()) is None
    monkeypatch.setattr(otlp, "sender_of", lambda exporter: None)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert tracing.setup_from_env("fallback", env)
    provider = tracing._provider
    assert provider is not None
    processors = provider._active_span_processor._span_processors
    assert [type(p) for p in processors] == [BatchSpanProcessor]


def test_an_unsampled_parent_makes_no_child_spans(no_tracer: None) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    tracer = provider.get_tracer("test")
    unsampled = trace.NonRecordingSpan(
        trace.SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=trace.TraceFlags(0))
    )
    child = tracing.start_span("child", parent=trace.set_span_in_context(unsampled))
    assert child is unsampled  # the parent itself: nothing made, nothing to end
    remote = trace.NonRecordingSpan(
        trace.SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=trace.TraceFlags(0))
    )
    # A remote parent's decision is the sampler's to honour (or not): it is asked.
    made = tracing.start_span("server", parent=trace.set_span_in_context(remote))
    assert made is not None and made is not remote and not made.is_recording()
    assert made.get_span_context().span_id != 0xDEF  # the sampler's (dropped) span
    tracing.end_span(made)
    with tracer.start_as_current_span("sampled"):
        inner = tracing.start_span("inner")
        assert inner is not None and inner.is_recording()
        tracing.end_span(inner)
    assert sorted(s.name for s in memory.get_finished_spans()) == ["inner", "sampled"]


def _context_with(parent: trace.SpanContext | None) -> object:
    if parent is None:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


@pytest.mark.parametrize("remote", [False, True])
@pytest.mark.parametrize("sampled", [False, True, None])  # None: no parent
@pytest.mark.parametrize("state", ["", "vendor=abc"])
def test_the_default_sampler_decides_as_the_sdks(remote: bool, sampled: bool, state: str) -> None:
    parent = None
    if sampled is not None:
        parent = trace.SpanContext(
            0xABC,
            0xDEF,
            is_remote=remote,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else 0),
            trace_state=TraceState.from_header([state]) if state else None,
        )
    context = _context_with(parent)
    for attributes in (None, {"mail.task_id": "t", "n": 1}):
        ours = ParentBasedAlwaysOn().should_sample(context, 0xABC, "span", None, attributes)  # type: ignore[arg-type]
        sdks = ParentBased(ALWAYS_ON).should_sample(context, 0xABC, "span", None, attributes)  # type: ignore[arg-type]
        assert ours.decision == sdks.decision
        assert dict(ours.attributes) == dict(sdks.attributes)
        assert (ours.trace_state or TraceState()).to_header() == (
            sdks.trace_state or TraceState()
        ).to_header()
    assert ParentBasedAlwaysOn().get_description() == ParentBased(ALWAYS_ON).get_description()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [(None, ParentBasedAlwaysOn), ("parentbased_always_on", ParentBasedAlwaysOn)]
    + [("always_off", StaticSampler), ("parentbased_traceidratio", ParentBasedTraceIdRatio)],
)
def test_only_the_default_sampler_is_replaced(
    no_tracer: None, monkeypatch: pytest.MonkeyPatch, setting: str | None, expected: type
) -> None:
    env = {"OTEL_TRACES_EXPORTER": "console"}
    if setting is not None:
        env["OTEL_TRACES_SAMPLER"] = setting
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", setting)  # the SDK reads os.environ
    assert tracing.setup_from_env("sampling", env)
    assert tracing._provider is not None
    assert type(tracing._provider.sampler) is expected
