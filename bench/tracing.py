"""What tracing costs a `mail server` at 16 kept-alive clients (not a test): prints numbers.

    uv run python bench/tracing.py [--swarm stub|llm] [--rounds 6] [--requests 800]
                                   [--baseline SRC [--baseline-on]] [--sampled RATIO]

Each server is `mail server` started from a scratch folder, as the docs start it (access log
on, info logging to a file), answering POST /message (JSON) to 16 raw kept-alive clients over
4 users (`bench/http.py`'s client):

- ``off``: this tree, no ``OTEL_*`` variables (tracing off);
- ``on``: this tree, ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a local OTLP/HTTP receiver (its own
  process; it counts the spans it decodes, so dropped spans would show), default batch
  processor settings: every request traced and exported;
- ``sampled``: as ``on`` with ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` at
  ``--sampled`` (skipped with ``--sampled 0``);
- ``base``: tracing off, ``mail`` imported from ``--baseline`` (a ``src`` directory, e.g. of
  ``git archive main``), to compare ``off`` with today's main; ``base-on`` (with
  ``--baseline-on``): that tree traced as ``on`` is.

Swarms: ``stub`` is `bench/http.py`'s supervisor + 3 workers with agents that answer at once
(3 agent turns, 3 MAIL tool calls per request: MAIL's own work only, so tracing's share is at
its largest); ``llm`` is a LiteLLM supervisor and worker on a scripted OpenAI-compatible model
in its own process (3 model calls per request, as users run it).

The servers are measured in interleaved rounds (order rotated every round; this VM's speed
drifts by a fifth over seconds): req/s and the server process's CPU per request (all its
threads, so the batch exporter's encoding counts). Each round also runs the floor in a fresh
process: N spans made and ended with the bare OpenTelemetry SDK (same resource, span shape,
batch processor and OTLP/HTTP exporter to the same receiver), split into making the spans
(main thread) and exporting them (the processor's thread), so the SDK's own per-span cost is
known in the same run. Spans per request come from the receiver.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is named like the stdlib package: keep this directory off sys.path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
TARGET_PCT = 15.0
FLOOR_SPANS = 4000
# The span the floor makes: attributes like an agent turn's or a tool call's.
FLOOR_ATTRIBUTES = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "send_request",
    "mail.task_id": "0f6a2b3c-4d5e-4f70-8a9b-0c1d2e3f4a5b",
}


def _load_http_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_http", HERE / "http.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ helper processes


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
    print(json.dumps(results))


def serve_toggled(port: str) -> None:
    """`mail server` in this process, plus a SIGUSR1 handler that switches tracing off (the
    tracer set aside) and on again: both halves of a pair measured in one process."""
    import signal

    from mail.telemetry import tracing

    set_aside: list[Any] = []

    def toggle(*_: Any) -> None:
        if tracing._tracer is not None:
            set_aside[:] = [tracing._tracer]
            tracing._tracer = None
        elif set_aside:
            tracing._tracer = set_aside.pop()

    signal.signal(signal.SIGUSR1, toggle)
    sys.path.insert(0, os.getcwd())  # the scratch folder's tracing_swarm module
    from mail.cli import main

    sys.exit(main(["server", "--port", port]))


# ------------------------------------------------------------------ the bench


def _helper(mode: str, workdir: Path, env: dict[str, str] | None = None) -> tuple[Any, int]:
    port_file = workdir / f"{mode}.port"
    proc = subprocess.Popen(
        [sys.executable, __file__, f"--{mode}", str(port_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"--{mode} helper did not start")
        time.sleep(0.02)
    return proc, int(port_file.read_text())


def swarms_json(swarm: str, model_url: str) -> list[dict[str, Any]]:
    if swarm == "stub":
        workers = ["w1", "w2", "w3"]
        agents = [
            {
                "name": "supervisor",
                "factory": "python::tracing_swarm:supervisor",
                "comm_targets": workers,
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "agent_params": {},
            }
        ] + [
            {
                "name": w,
                "factory": "python::tracing_swarm:worker",
                "comm_targets": ["supervisor"],
                "agent_params": {},
            }
            for w in workers
        ]
    else:

        def params(role: str) -> dict[str, Any]:
            return {
                "llm": "openai/gpt-4o-mini",
                "use_proxy": False,
                "api_base": model_url,
                "api_key": "bench",
                "system": f"ROLE={role}",
                "memory": False,
            }

        agents = [
            {
                "name": "supervisor",
                "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                "comm_targets": ["worker"],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "tool_format": "completions",
                "agent_params": params("supervisor"),
            },
            {
                "name": "worker",
                "factory": "python::mail.factories.action:LiteLLMActionAgentFunction",
                "comm_targets": ["supervisor"],
                "tool_format": "completions",
                "agent_params": params("worker"),
            },
        ]
    return [
        {
            "name": "bench",
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "agents": agents,
            "actions": [],
        }
    ]


class Server:
    """`mail server` from its own scratch folder, with its own environment."""

    def __init__(
        self,
        http: Any,
        folder: Path,
        swarm: str,
        model_url: str,
        env: dict[str, str],
        toggled: bool = False,
    ):
        folder.mkdir()
        shutil.copy(HERE / "tracing_swarm.py", folder / "tracing_swarm.py")
        (folder / "swarms.json").write_text(json.dumps(swarms_json(swarm, model_url)))
        (folder / "mail.toml").write_text(
            '[server]\nhost = "127.0.0.1"\naccess_log = true\nlog_level = "info"\n'
            '[server.swarm]\nname = "bench"\nsource = "swarms.json"\n'
            'registry = "registries/bench.json"\n'
            "[server.settings]\ntask_message_limit = 0\nprint_llm_streams = false\n"
            "instance_idle_timeout = 0\n"
        )
        self.keys = http.make_keys(folder / "registries" / "keys.json", 4)
        self.port = http.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (folder / "server.log").open("wb")
        command = [sys.executable, "-m", "mail.cli", "server", "--port", str(self.port)]
        if toggled:  # the same, with a SIGUSR1 handler that turns tracing off and on
            command = [sys.executable, __file__, "--serve-toggled", str(self.port)]
        self.proc = subprocess.Popen(
            command,
            cwd=folder,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=self.log,
            stderr=self.log,
        )
        self.requests = 0
        self.tracing_on = True  # a toggled server's state
        http.wait_health(self.url, self.proc)

    def close(self, http: Any) -> None:
        http.stop(self.proc)
        self.log.close()


def receiver_count(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as reply:
        return dict(json.loads(reply.read()))


def median_range(values: list[float], fmt: str = "{:.0f}") -> str:
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def run(args: argparse.Namespace) -> None:
    http = _load_http_bench()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base_env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    with tempfile.TemporaryDirectory(prefix="mail-trace-bench-") as tmp:
        workdir = Path(tmp)
        helpers = []
        servers: dict[str, Server] = {}
        try:
            receiver, receiver_port = _helper("receive", workdir, base_env)
            helpers.append(receiver)
            model_url = ""
            if args.swarm == "llm":
                model, model_port = _helper("model", workdir, base_env)
                helpers.append(model)
                model_url = f"http://127.0.0.1:{model_port}/v1"
            endpoint = f"http://127.0.0.1:{receiver_port}"
            variants: dict[str, dict[str, str]] = {
                "off": base_env,
                "on": {
                    **base_env,
                    "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                    "OTEL_SERVICE_NAME": "bench-on",
                },
            }
            if args.sampled:
                variants["sampled"] = {
                    **variants["on"],
                    "OTEL_SERVICE_NAME": "bench-sampled",
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                    "OTEL_TRACES_SAMPLER_ARG": str(args.sampled),
                }
            if args.baseline:
                src = str(Path(args.baseline).resolve())
                variants["base"] = {**base_env, "PYTHONPATH": src}
                if args.baseline_on:
                    variants["base-on"] = {
                        **variants["on"],
                        "PYTHONPATH": src,
                        "OTEL_SERVICE_NAME": "bench-base-on",
                    }
            for name, env in variants.items():
                servers[name] = Server(http, workdir / name, args.swarm, model_url, env)
            toggled = None
            if args.toggle:
                env = {**variants["on"], "OTEL_SERVICE_NAME": "bench-toggled"}
                toggled = Server(http, workdir / "toggled", args.swarm, model_url, env, True)
                servers["toggled"] = toggled
            for server in servers.values():  # warm-up: the 4 users' instances, LiteLLM
                asyncio.run(http.load("raw", server.url, server.keys, 16, 320, False))
                server.requests += 320 + 16
            rps: dict[str, list[float]] = {name: [] for name in servers if name != "toggled"}
            cpu: dict[str, list[float]] = {name: [] for name in rps}
            pairs: dict[bool, list[float]] = {True: [], False: []}  # the toggled server's
            floors: list[dict[str, float]] = []
            names = list(rps)
            for number in range(args.rounds):
                print(f"  ... round {number + 1} of {args.rounds}", file=sys.stderr)
                order = names[number % len(names) :] + names[: number % len(names)]
                if number % 2:
                    order.reverse()
                for name in order:
                    server = servers[name]
                    before = http.cpu_seconds(server.proc.pid)
                    got, _ = asyncio.run(
                        http.load("raw", server.url, server.keys, 16, args.requests, False)
                    )
                    used = http.cpu_seconds(server.proc.pid) - before
                    server.requests += args.requests + 16
                    rps[name].append(got)
                    cpu[name].append(used / args.requests * 1e6)
                if toggled is not None:
                    measure_pair(http, toggled, args.requests, number, pairs)
                floor = subprocess.run(
                    [sys.executable, __file__, "--floor", str(FLOOR_SPANS), endpoint],
                    env=base_env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                floors.append(json.loads(floor.stdout))
            before_close = receiver_count(receiver_port)
        finally:
            for server in servers.values():
                server.close(http)  # a clean exit flushes the batch processor
        exported = receiver_count(receiver_port)
        for helper in helpers:
            helper.terminate()
            helper.wait(10)
    report(args, rps, cpu, floors, servers, exported, before_close)
    if args.toggle:
        report_pairs(pairs)


def measure_pair(
    http: Any, server: Server, requests: int, number: int, pairs: dict[bool, list[float]]
) -> None:
    """One round of the toggled server: tracing on, then off (or off, then on: ABBA)."""
    for want in (True, False) if number % 2 == 0 else (False, True):
        if want != server.tracing_on:
            os.kill(server.proc.pid, signal.SIGUSR1)
            server.tracing_on = want
            # a few requests first: the signal is handled between two of them
            asyncio.run(http.load("raw", server.url, server.keys, 16, 32, False))
        before = http.cpu_seconds(server.proc.pid)
        asyncio.run(http.load("raw", server.url, server.keys, 16, requests, False))
        pairs[want].append((http.cpu_seconds(server.proc.pid) - before) / requests * 1e6)


def report_pairs(pairs: dict[bool, list[float]]) -> None:
    ratios = [100 * (on / off - 1) for on, off in zip(pairs[True], pairs[False], strict=True)]
    print(
        "one server, tracing switched on and off between back-to-back halves of each round: "
        f"server CPU per request on {median_range(pairs[True])} us, off "
        f"{median_range(pairs[False])} us; paired ratio {statistics.median(ratios):+.1f}% "
        f"({min(ratios):+.1f}..{max(ratios):+.1f})"
    )


def report(
    args: argparse.Namespace,
    rps: dict[str, list[float]],
    cpu: dict[str, list[float]],
    floors: list[dict[str, float]],
    servers: dict[str, Server],
    exported: dict[str, int],
    before_close: dict[str, int],
) -> None:
    print(
        f"swarm {args.swarm}: POST /message (json), 16 raw kept-alive clients over 4 users, "
        f"{args.requests} requests a round, {args.rounds} rounds; median (range):"
    )
    for name in rps:
        print(
            f"  {name:<8} req/s {median_range(rps[name]):<18} server CPU per request "
            f"{median_range(cpu[name])} us"
        )
    for name in [n for n in rps if n != "off"]:
        ratios_rps = [a / b for a, b in zip(rps[name], rps["off"], strict=True)]
        ratios_cpu = [a / b for a, b in zip(cpu[name], cpu["off"], strict=True)]
        lost = [100 * (1 - r) for r in ratios_rps]
        more = [100 * (r - 1) for r in ratios_cpu]
        verdict = ""
        if name == "on":
            ok = statistics.median(lost) <= TARGET_PCT
            verdict = "  (target met)" if ok else "  (TARGET MISSED)"
        print(
            f"  {name:<8} vs off, paired by round: req/s {-statistics.median(lost):+.1f}% "
            f"({-max(lost):+.1f}..{-min(lost):+.1f}), CPU per request "
            f"{statistics.median(more):+.1f}% ({min(more):+.1f}..{max(more):+.1f}){verdict}"
        )
    per_request = 0.0
    for name in ("on", "sampled", "base-on"):
        if name not in servers:
            continue
        got = exported.get(f"bench-{name}", 0)
        sent = servers[name].requests
        if name == "on":
            per_request = got / sent
        print(
            f"  {name}: {got} spans exported for {sent} requests = {got / sent:.2f} per request "
            f"({before_close.get(f'bench-{name}', 0)} of them before the server exited)"
        )
    keys = list(floors[0])
    print(f"floor: {FLOOR_SPANS} bare OpenTelemetry SDK spans per round, CPU us per span:")
    for key in keys:
        print(f"  {key:<40} {median_range([f[key] for f in floors], '{:.1f}')}")
    off = statistics.median(cpu["off"])
    on_extra = statistics.median(cpu["on"]) - off
    print(
        f"  per request, {per_request:.2f} spans at each floor (share of the untraced request's "
        f"{off:.0f} us of CPU; tracing added {on_extra:.0f} us = {100 * on_extra / off:.0f}%):"
    )
    for key in [k for k in keys if k.endswith(": all")]:
        per_span = statistics.median(f[key] for f in floors)
        cost = per_span * per_request
        print(
            f"    {key.removesuffix(': all'):<36} {per_span:5.1f} us x {per_request:.2f} = "
            f"{cost:4.0f} us = {100 * cost / off:3.0f}%; {TARGET_PCT:.0f}% allows "
            f"{TARGET_PCT / 100 * off / per_span:.1f} spans"
        )


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] in ("--receive", "--model"):
        (serve_receiver if sys.argv[1] == "--receive" else serve_model)(sys.argv[2])
        return
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve-toggled":
        serve_toggled(sys.argv[2])
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "--floor":
        run_floor(int(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--swarm", choices=("stub", "llm"), default="stub")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=800, help="requests per round")
    parser.add_argument("--baseline", help="a src directory to compare 'off' with")
    parser.add_argument(
        "--baseline-on", action="store_true", help="also trace the baseline ('base-on')"
    )
    parser.add_argument(
        "--sampled", type=float, default=0.1, help="sampling ratio of the 'sampled' server"
    )
    parser.add_argument(
        "--toggle",
        action="store_true",
        help="also one server whose tracing is switched off and on between paired rounds",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
