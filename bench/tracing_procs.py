"""The processes `bench/tracing.py` starts (not a test), one per mode:

    python bench/tracing_procs.py --receive PORT_FILE     OTLP/HTTP receiver counting spans
    python bench/tracing_procs.py --model PORT_FILE       scripted OpenAI-compatible model
    python bench/tracing_procs.py --floor COUNT ENDPOINT  bare SDK spans, CPU per span (JSON)
    python bench/tracing_procs.py --serve-toggled PORT    `mail server`, tracing switched by
                                                          SIGUSR1, its cost reported on SIGUSR2

The helpers write the port they listen on to PORT_FILE.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib package: keep this directory off sys.path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

FLOOR_SPANS = 4000
# The span the floor makes: attributes like an agent turn's or a tool call's.
FLOOR_ATTRIBUTES = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "send_request",
    "mail.task_id": "0f6a2b3c-4d5e-4f70-8a9b-0c1d2e3f4a5b",
}


def serve_receiver(port_file: str) -> None:
    """OTLP/HTTP on loopback: decodes each export, counts spans; GET /count reports."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    counts: dict[str, int] = {"exports": 0, "bytes": 0}  # and spans per service name
    reply = ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            if length > 64 * 1024 * 1024:
                self.send_error(413)
                return
            body = self.rfile.read(length)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource_spans in request.resource_spans:
                service = next(
                    (
                        a.value.string_value
                        for a in resource_spans.resource.attributes
                        if a.key == "service.name"
                    ),
                    "",
                )
                made = sum(len(scope.spans) for scope in resource_spans.scope_spans)
                counts[service] = counts.get(service, 0) + made
            counts["exports"] += 1
            counts["bytes"] += length
            self._answer(reply, "application/x-protobuf")

        def do_GET(self) -> None:  # noqa: N802
            self._answer(json.dumps(counts).encode(), "application/json")

        def _answer(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def serve_model(port_file: str) -> None:
    """A scripted OpenAI-compatible chat-completions model: the supervisor delegates each user
    message to the worker and completes the task on the answer; the worker answers."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    def reply(name: str, arguments: dict[str, Any]) -> bytes:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
        return json.dumps(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 0,
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
            }
        ).encode()

    delegate = reply("send_request", {"target": "worker", "subject": "job", "body": "do"})
    answer = reply("send_response", {"target": "supervisor", "subject": "re", "body": "r"})
    complete = reply("task_complete", {"finish_message": "done"})

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            messages = request.get("messages") or [{}]
            if "ROLE=worker" in str(messages[0].get("content")):
                body = answer
            elif 'type="user"' in str(messages[-1].get("content")):
                body = delegate
            else:
                body = complete
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def run_floor(count: int, endpoint: str) -> None:
    """`count` bare SDK spans (children of one parent, 3 attributes) through each pipeline;
    prints JSON: CPU microseconds per span for making and ending them (main thread) and for
    everything (all threads, until the processor has exported them)."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    def otlp() -> OTLPSpanExporter:
        return OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")

    # Queues that hold every span: a dropped span would look free.
    pipelines: dict[str, Any] = {
        "SDK, no processor": lambda: None,
        "SDK batch, discarding exporter": lambda: BatchSpanProcessor(
            Discard(), max_queue_size=count + 1
        ),
        "SDK batch + OTLP/HTTP": lambda: BatchSpanProcessor(otlp(), max_queue_size=count + 1),
        "mail's encoding batch + OTLP/HTTP": lambda: mail_processor(count),
    }

    def mail_processor(count: int) -> Any:
        from mail.telemetry.otlp import EncodingBatchProcessor, sender_of

        exporter = otlp()
        send = sender_of(exporter)
        assert send is not None
        return EncodingBatchProcessor(send, max_queue_size=count + 1)

    results: dict[str, float] = {}
    for label, make_processor in pipelines.items():
        provider = TracerProvider(resource=Resource.create({"service.name": "floor"}))
        processor = make_processor()
        if processor is not None:
            provider.add_span_processor(processor)
        tracer = provider.get_tracer("mail", "bench")
        for _ in range(300):  # warm-up
            tracer.start_span("warm", attributes=FLOOR_ATTRIBUTES).end()
        provider.force_flush()
        parent = tracer.start_span("parent")
        context = trace.set_span_in_context(parent)
        main0, all0 = time.thread_time(), time.process_time()
        for _ in range(count):
            tracer.start_span(
                "execute_tool send_request", context, attributes=FLOOR_ATTRIBUTES
            ).end()
        main1 = time.thread_time()
        provider.force_flush()
        all1 = time.process_time()
        parent.end()
        provider.shutdown()
        results[f"{label}: make"] = (main1 - main0) / count * 1e6
        results[f"{label}: all"] = (all1 - all0) / count * 1e6
    results.update(lean_floor(count, mail_processor(count)))
    print(json.dumps(results))


def lean_floor(count: int, processor: Any) -> dict[str, float]:
    """As `floor`, through mail's own helpers on the lean span path (`mail.telemetry.lean`)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from mail.telemetry import tracing
    from mail.telemetry.sampler import ParentBasedAlwaysOn

    provider = TracerProvider(
        resource=Resource.create({"service.name": "floor"}), sampler=ParentBasedAlwaysOn()
    )
    provider.add_span_processor(processor)
    tracing.install(provider)
    assert tracing._lean is not None
    for _ in range(300):  # warm-up
        tracing.end_span(tracing.start_span("warm", attributes=FLOOR_ATTRIBUTES))
    provider.force_flush()
    parent = tracing.start_span("parent")
    assert parent is not None
    context = tracing.context_of(parent)
    main0, all0 = time.thread_time(), time.process_time()
    for _ in range(count):
        tracing.end_span(
            tracing.start_span(
                "execute_tool send_request", parent=context, attributes=FLOOR_ATTRIBUTES
            )
        )
    main1 = time.thread_time()
    provider.force_flush()
    all1 = time.process_time()
    tracing.end_span(parent)
    tracing.shutdown()
    label = "mail's lean spans + OTLP/HTTP"
    return {
        f"{label}: make": (main1 - main0) / count * 1e6,
        f"{label}: all": (all1 - all0) / count * 1e6,
    }


def serve_toggled(port: str) -> None:
    """`mail server` in this process. SIGUSR1 switches tracing off (the tracer set aside) and
    on again; the first SIGUSR2 starts adding up the CPU time spent inside the tracing calls
    (`mail.telemetry.tracing`'s span helpers and the span events of tool calls), the next one
    writes it to ``$BENCH_TRACING_COSTS`` as {call: [count, seconds]} and stops."""
    import signal

    from opentelemetry.sdk.trace import Span

    from mail.telemetry import tracing
    from mail.telemetry.lean import LeanSpan

    costs: dict[str, list[float]] = {}
    counting = [False]

    def counted(owner: Any, name: str, label: str) -> None:
        call = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not counting[0]:
                return call(*args, **kwargs)
            started = time.thread_time()
            try:
                return call(*args, **kwargs)
            finally:
                entry = costs.setdefault(label, [0, 0.0])
                entry[0] += 1
                entry[1] += time.thread_time() - started

        setattr(owner, name, wrapper)

    for name in ("start_span", "end_span", "attach", "detach"):
        counted(tracing, name, name)
    counted(Span, "add_event", "add_event (SDK)")
    counted(LeanSpan, "add_event", "add_event (lean)")

    set_aside: list[Any] = []

    def toggle(*_: Any) -> None:
        if tracing._tracer is not None:
            set_aside[:] = [tracing._tracer]
            tracing._tracer = None
        elif set_aside:
            tracing._tracer = set_aside.pop()

    def count(*_: Any) -> None:
        if not counting[0]:
            costs.clear()
            counting[0] = True
            return
        counting[0] = False
        target = Path(os.environ["BENCH_TRACING_COSTS"])
        partial = target.with_suffix(".part")
        partial.write_text(json.dumps(costs))
        partial.replace(target)

    signal.signal(signal.SIGUSR1, toggle)
    signal.signal(signal.SIGUSR2, count)
    sys.path.insert(0, os.getcwd())  # the scratch folder's tracing_swarm module
    from mail.cli import main as mail_main

    sys.exit(mail_main(["server", "--port", port]))


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "--receive":
        serve_receiver(args[0])
    elif mode == "--model":
        serve_model(args[0])
    elif mode == "--floor":
        run_floor(int(args[0]), args[1])
    elif mode == "--serve-toggled":
        serve_toggled(args[0])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
