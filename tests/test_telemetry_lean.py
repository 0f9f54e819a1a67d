"""The lean span path (`mail.telemetry.lean`) against the SDK's: the same traced tasks give
the same decoded OTLP spans; which setups take it; sampling and propagation under it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.telemetry_fixtures import demo_swarm

from mail.telemetry import tracing
from mail.telemetry.otlp import EncodingBatchProcessor
from mail.telemetry.sampler import ParentBasedAlwaysOn

TASK = str(uuid.UUID(int=1))
PAUSED = str(uuid.UUID(int=2))


@pytest.fixture(autouse=True)
def no_tracer() -> Iterator[None]:
    tracing.shutdown()
    yield
    tracing.shutdown()


def _provider(sampler: Any = None) -> tuple[TracerProvider, list[bytes]]:
    sent: list[bytes] = []

    def send(data: bytes) -> bool:
        sent.append(data)
        return True

    provider = TracerProvider(
        resource=Resource.create({"service.name": "parity"}),
        sampler=sampler or ParentBasedAlwaysOn(),
    )
    provider.add_span_processor(EncodingBatchProcessor(send, schedule_delay_millis=60_000))
    return provider, sent


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {pair.key: _value(pair.value) for pair in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    found = {}
    for pair in pairs:
        value = _value(pair.value)
        if pair.key in ("gen_ai.tool.call.id",):
            value = "<id>"  # drawn afresh by the demo model on every run
        found[pair.key] = value
    return found


def _decoded(sent: list[bytes]) -> tuple[list[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """The spans of `sent` as comparable rows (ids replaced by the names of the spans they
    point at), and the (resource, scope) envelopes they came in."""
    spans = []
    envelopes = set()
    for data in sent:
        request = ExportTraceServiceRequest()
        request.ParseFromString(data)
        for resource_spans in request.resource_spans:
            resource = tuple(sorted(_attributes(resource_spans.resource.attributes).items()))
            for scope_spans in resource_spans.scope_spans:
                scope = (scope_spans.scope.name, scope_spans.scope.version)
                envelopes.add((resource, scope))
                spans += scope_spans.spans
    by_id = {s.span_id: s for s in spans}
    assert len({s.trace_id for s in spans}) == 2  # one trace per task
    rows = []
    for span in spans:
        parent = by_id.get(span.parent_span_id)
        assert span.parent_span_id == b"" or parent is not None, span.name
        assert parent is None or parent.trace_id == span.trace_id
        assert span.start_time_unix_nano <= span.end_time_unix_nano
        events = tuple(
            (e.name, tuple(sorted(_attributes(e.attributes).items()))) for e in span.events
        )
        rows.append(
            (
                span.name,
                span.kind,
                parent.name if parent is not None else None,
                tuple(sorted(_attributes(span.attributes).items())),
                events,
                (span.status.code, span.status.message),
                span.flags,
                span.dropped_attributes_count,
                span.dropped_events_count,
                span.trace_state,
            )
        )
    return sorted(rows, key=repr), envelopes


async def _traced_tasks(lean: bool) -> list[bytes]:
    provider, sent = _provider()
    tracing.install(provider, lean=lean)
    assert (tracing._lean is not None) is lean
    swarm = demo_swarm()
    try:
        response, _ = await swarm.post_message(
            "What is the weather in Paris tomorrow?", task_id=TASK
        )
        assert response["message"]["subject"] != "::task_error::", response
    finally:
        await swarm.shutdown()
    swarm = demo_swarm(breakpoint_tools=["get_weather_forecast"])
    try:
        response, _ = await swarm.post_message(
            "What is the weather in Paris tomorrow?", task_id=PAUSED
        )
        assert response["message"]["subject"] == "::breakpoint_tool_call::"
    finally:
        await swarm.shutdown()
    tracing.shutdown()  # flushes
    return sent


async def test_both_paths_export_the_same_spans_for_the_same_tasks() -> None:
    sdk_rows, sdk_envelopes = _decoded(await _traced_tasks(lean=False))
    lean_rows, lean_envelopes = _decoded(await _traced_tasks(lean=True))
    names = {row[0] for row in lean_rows}
    # The task had delegation, an action and a breakpoint: all of it is there.
    assert {"mail.task", "invoke_agent supervisor", "invoke_agent weather"} <= names
    assert {"execute_tool get_weather_forecast", "mail.breakpoint", "chat mail/demo"} <= names
    assert any(event[0] == "execute_tool send_request" for row in lean_rows for event in row[4])
    assert lean_envelopes == sdk_envelopes
    assert lean_rows == sdk_rows


def test_the_otlp_setup_takes_the_lean_path_and_others_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        assert tracing.setup_from_env("lean")
        assert tracing._lean is not None
        span = tracing.start_span("over OTLP", kind="CLIENT", attributes={"n": 1})
        assert span is not None and type(span).__name__ == "LeanSpan"
        tracing.end_span(span, "boom")
        tracing.shutdown()
        [received] = receiver.wait_for(lambda spans: len(spans) == 1, timeout=10)
    assert received.service == "lean" and received.name == "over OTLP"
    assert received.trace_id == format(span.get_span_context().trace_id, "032x")
    # Two exporters, or one a test installs: the SDK's spans.
    assert tracing.setup_from_env("two", {"OTEL_TRACES_EXPORTER": "otlp,console"})
    assert tracing._lean is None
    tracing.shutdown()
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    assert tracing._lean is None


def test_lean_propagation_both_ways() -> None:
    provider, sent = _provider()
    tracing.install(provider)
    incoming = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "vendor=abc",
    }
    server = tracing.start_span("server", parent=tracing.extract(incoming), kind="SERVER")
    assert server is not None and server.is_recording()
    token = tracing.attach(server)
    outgoing: dict[str, str] = {}
    tracing.inject(outgoing)
    tracing.detach(token)
    tracing.end_span(server)
    context = server.get_span_context()
    assert outgoing == {
        "traceparent": f"00-0af7651916cd43dd8448eb211c80319c-{context.span_id:016x}-01",
        "tracestate": "vendor=abc",
    }
    after: dict[str, str] = {}
    tracing.inject(after)  # detached: no current span
    assert after == {}
    tracing.shutdown()
    request = ExportTraceServiceRequest()
    request.ParseFromString(b"".join(sent))
    [span] = request.resource_spans[0].scope_spans[0].spans
    assert span.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert span.parent_span_id.hex() == "b7ad6b7169203331"
    assert span.flags == 0x300  # the parent is known to be remote
    assert span.trace_state == "vendor=abc"


def test_lean_sampling_follows_the_configured_sampler() -> None:
    provider, sent = _provider(ParentBased(ALWAYS_OFF))
    tracing.install(provider)
    assert tracing._lean is not None
    root = tracing.start_span("root")
    assert root is not None and not root.is_recording()
    assert tracing.start_span("child", parent=tracing.context_of(root)) is root  # nothing made
    sampled = tracing.extract({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"})
    kept = tracing.start_span("kept", parent=sampled)
    assert kept is not None and kept.is_recording()
    unsampled = tracing.extract({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-00"})
    dropped = tracing.start_span("dropped", parent=unsampled)
    assert dropped is not None and not dropped.is_recording()
    assert dropped.get_span_context().span_id != 0xCDCDCDCDCDCDCDCD  # its own (unsampled) id
    out: dict[str, str] = {}
    token = tracing.attach(dropped)
    tracing.inject(out)
    tracing.detach(token)
    assert out["traceparent"].endswith("-00")  # the decision travels on
    for span in (root, kept, dropped):
        tracing.end_span(span)
    tracing.shutdown()
    request = ExportTraceServiceRequest()
    request.ParseFromString(b"".join(sent))
    assert [s.name for s in request.resource_spans[0].scope_spans[0].spans] == ["kept"]


def _limited_span(lean: bool) -> Any:
    sent: list[bytes] = []
    limits = SpanLimits(
        max_span_attributes=2, max_events=1, max_event_attributes=1, max_attribute_length=3
    )
    provider = TracerProvider(
        resource=Resource.create({"service.name": "limits"}),
        sampler=ParentBasedAlwaysOn(),
        span_limits=limits,
    )
    provider.add_span_processor(
        EncodingBatchProcessor(lambda data: bool(sent.append(data)) or True)
    )
    tracing.install(provider, lean=lean)
    assert (tracing._lean is not None) is lean
    span = tracing.start_span("limited", attributes={"a": "long value", "b": 1, "c": None})
    assert span is not None
    span.set_attribute("d", ["xyzw", "v"])
    span.set_attributes({"e": True, "f": 2.5, "g": {"not": "a value"}})
    span.update_name("renamed")
    span.add_event("first", {"k": "value", "l": 2})
    span.add_event("second", {"m": "value"})
    tracing.end_span(span, "HTTP 500")
    span.set_attribute("after", "end")  # ignored: the span ended
    tracing.shutdown()
    request = ExportTraceServiceRequest()
    request.ParseFromString(b"".join(sent))
    [decoded] = request.resource_spans[0].scope_spans[0].spans
    return decoded


def test_both_paths_bound_spans_alike() -> None:
    sdk, lean = _limited_span(lean=False), _limited_span(lean=True)
    for span in (sdk, lean):
        span.ClearField("trace_id")
        span.ClearField("span_id")
        span.ClearField("start_time_unix_nano")
        span.ClearField("end_time_unix_nano")
        for event in span.events:
            event.ClearField("time_unix_nano")
    assert lean == sdk
    assert lean.name == "renamed" and lean.status.message == "HTTP 500"
    # The oldest go first: of a, b, c, d, e, f, g within a limit of 2, f and g stay.
    assert _attributes(lean.attributes) == {"f": 2.5, "g": {"not": "a v"}}
    assert lean.dropped_attributes_count == 5
    assert [e.name for e in lean.events] == ["second"] and lean.dropped_events_count == 1
