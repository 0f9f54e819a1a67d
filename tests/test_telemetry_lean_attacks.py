"""Hostile W3C trace headers against the lean span path's propagation: a caller's
``tracestate`` must neither flood the log nor reach spans when it is malformed."""

from __future__ import annotations

import logging
import re
import shutil
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.support import telemetry_fixtures
from tests.support.otlp_receiver import OTLPReceiver, ReceivedSpan

from mail.telemetry import tracing
from server_fixtures import ServerProcess, auth, create_key, free_port, write_config

spans = telemetry_fixtures.spans  # the fixture

REPO = Path(__file__).resolve().parents[1]
GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "state",
    [
        "bad member with spaces",  # not key=value
        "k=v,UPPER=1",  # keys are lowercase
        "k=v,k=w",  # a duplicate key
        "k=caf\u00e9",  # non-ASCII value
        ",".join(f"k{i}=v" for i in range(33)),  # more than 32 members
    ],
)
def test_a_malformed_tracestate_is_dropped_quietly(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture, state: str
) -> None:
    with caplog.at_level(logging.DEBUG):
        parent = tracing.extract({"traceparent": GOOD, "tracestate": state})
    assert parent is not None  # the traceparent is still honoured
    context = trace.get_current_span(parent).get_span_context()
    assert f"{context.trace_id:032x}" == GOOD.split("-")[1]
    assert not context.trace_state
    # anyone can send these: one log record per request is a flood, with the caller's text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [
        r.getMessage() for r in caplog.records
    ]


def test_a_valid_tracestate_is_kept(spans: InMemorySpanExporter) -> None:
    state = "vendor@tenant=abc,k=v" + "".join(f",k{i}=v" for i in range(30))
    parent = tracing.extract({"traceparent": GOOD, "tracestate": state})
    assert parent is not None
    context = trace.get_current_span(parent).get_span_context()
    assert context.trace_state.get("vendor@tenant") == "abc" and len(context.trace_state) == 32


def test_hostile_trace_headers_on_a_real_server(tmp_path: Path) -> None:
    """`mail server` with an OTLP endpoint (the lean path): hostile headers on POST /message
    never fail the request, never name the trace, and leave nothing in the server's log."""
    shutil.copy(REPO / "swarms.json", tmp_path / "swarms.json")
    admin = create_key(tmp_path / "registries" / "keys.json", "admin", "root")
    port = free_port()
    # The caller is a trusted source (a proxy on this machine): its trace headers are read.
    trusted = '\n[server.telemetry]\ntrusted_trace_sources = ["127.0.0.1"]\n'
    config = write_config(tmp_path, port=port, swarm="demo", extra=trusted)
    trace_id, span_id = GOOD.split("-")[1:3]
    hostile = [
        {"traceparent": GOOD.upper()},  # uppercase hex
        {"traceparent": f"ff-{trace_id}-{span_id}-01"},  # the forbidden version
        {"traceparent": f"00-{'0' * 32}-{span_id}-01"},  # the invalid trace id
        {"traceparent": GOOD + "-" + "x" * 8000},  # huge
    ]
    with OTLPReceiver() as receiver:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        server = ServerProcess(tmp_path, port, args=["--config", str(config)], env=otel).start()
        try:
            sent = [*hostile, {"traceparent": GOOD, "tracestate": "caf\u00e9 au lait".encode()}]
            for headers in sent:  # type: ignore[assignment]
                r = httpx.post(
                    f"{server.base_url}/message",
                    json={"body": "What is 6 times 7?", "task_id": str(uuid.uuid4())},
                    headers={**auth(admin), **headers},
                    timeout=60,
                )
                assert r.status_code == 200, r.text

            def all_requests(spans: list[ReceivedSpan]) -> bool:
                return sum(s.name.startswith("POST /message") for s in spans) >= len(sent)

            requests = [s for s in receiver.wait_for(all_requests) if s.name.startswith("POST")]
            honoured = [s for s in requests if s.trace_id == trace_id]
            # only the well-formed traceparent names the trace (its bad tracestate dropped)
            assert len(honoured) == 1 and honoured[0].parent_span_id == span_id
            assert all(s.trace_id != "0" * 32 and len(s.trace_id) == 32 for s in requests)
        finally:
            server.stop()
        log = server.stderr_path.read_text(encoding="utf-8", errors="replace")
        assert "w3c identifiers" not in log and "au lait" not in log


def test_a_receiver_that_never_answers_neither_slows_requests_nor_holds_up_exit(
    tmp_path: Path,
) -> None:
    shutil.copy(REPO / "swarms.json", tmp_path / "swarms.json")
    admin = create_key(tmp_path / "registries" / "keys.json", "admin", "root")
    port = free_port()
    config = write_config(tmp_path, port=port, swarm="demo")
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BSP_MAX_QUEUE_SIZE": "4",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
        }
        server = ServerProcess(tmp_path, port, args=["--config", str(config)], env=env).start()
        try:
            for _ in range(4):
                started = time.monotonic()
                r = httpx.post(
                    f"{server.base_url}/message",
                    json={"body": "What is 6 times 7?", "task_id": str(uuid.uuid4())},
                    headers=auth(admin),
                    timeout=60,
                )
                assert r.status_code == 200, r.text
                assert time.monotonic() - started < 5  # no request waits for the receiver
        finally:
            started = time.monotonic()
            server.stop(timeout=60)
            stopped_in = time.monotonic() - started
    # exit waited 30 s (and more for the final export) before
    assert stopped_in < 15, stopped_in
    # The batch held in the send counts among the spans lost (it read "0 queued" before).
    found = re.search(
        r"(\d+) spans \(queued or being sent\) dropped at exit",
        server.stderr_path.read_text(encoding="utf-8"),
    )
    assert found is not None and int(found.group(1)) >= 1


def test_sigterm_with_a_full_queue_and_a_silent_receiver_exits_within_the_bound(
    tmp_path: Path,
) -> None:
    """Each send to a receiver that never answers takes OTEL_EXPORTER_OTLP_TIMEOUT; exit must
    not send the queued batches one timeout after another (it took 43 s with the defaults)."""
    shutil.copy(REPO / "swarms.json", tmp_path / "swarms.json")
    admin = create_key(tmp_path / "registries" / "keys.json", "admin", "root")
    port = free_port()
    config = write_config(tmp_path, port=port, swarm="demo")
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2",  # each send gives up after 2 s
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BSP_MAX_QUEUE_SIZE": "200",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",  # a full queue: 100 sends
        }
        server = ServerProcess(tmp_path, port, args=["--config", str(config)], env=env).start()
        try:
            for _ in range(12):
                r = httpx.post(
                    f"{server.base_url}/message",
                    json={"body": "What is 6 times 7?", "task_id": str(uuid.uuid4())},
                    headers=auth(admin),
                    timeout=60,
                )
                assert r.status_code == 200, r.text
        finally:
            assert server.proc is not None
            started = time.monotonic()
            server.proc.terminate()  # SIGTERM, as a process manager stops it
            try:
                code = server.proc.wait(90)
            finally:
                stopped_in = time.monotonic() - started
    log = server.stderr_path.read_text(encoding="utf-8")
    assert code == 0, log[-3000:]
    # The server's own shutdown, then at most 5 s for the receiver (slack for a busy machine).
    assert stopped_in < 12, (stopped_in, log[-2000:])
    assert "did not answer within 5 s" in log and "(queued or being sent) dropped at exit" in log


def _post_with(server: ServerProcess, key: str, headers: dict[str, str]) -> None:
    r = httpx.post(
        f"{server.base_url}/message",
        json={"body": "What is 6 times 7?", "task_id": str(uuid.uuid4())},
        headers={**auth(key), **headers},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def test_an_untrusted_callers_traceparent_only_becomes_a_link(tmp_path: Path) -> None:
    """By default nobody is trusted on public routes: the request starts its own trace and
    links to the caller's, so a caller can neither pick trace ids nor join another trace."""
    shutil.copy(REPO / "swarms.json", tmp_path / "swarms.json")
    admin = create_key(tmp_path / "registries" / "keys.json", "admin", "root")
    port = free_port()
    config = write_config(tmp_path, port=port, swarm="demo")
    trace_id, span_id = GOOD.split("-")[1:3]
    with OTLPReceiver() as receiver:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        server = ServerProcess(tmp_path, port, args=["--config", str(config)], env=otel).start()
        try:
            _post_with(server, admin, {"traceparent": GOOD})

            def the_request(spans: list[ReceivedSpan]) -> bool:
                return any(s.name.startswith("POST /message") for s in spans)

            found = receiver.wait_for(the_request)
        finally:
            assert server.stop() == 0
    request = next(s for s in found if s.name.startswith("POST /message"))
    assert request.trace_id != trace_id and request.parent_span_id == "", request
    assert request.links == ((trace_id, span_id),), request
    assert all(s.trace_id != trace_id for s in found)


def test_a_sampled_header_does_not_force_export_at_sample_ratio_0(tmp_path: Path) -> None:
    shutil.copy(REPO / "swarms.json", tmp_path / "swarms.json")
    admin = create_key(tmp_path / "registries" / "keys.json", "admin", "root")
    port = free_port()
    config = write_config(tmp_path, port=port, swarm="demo")
    with OTLPReceiver() as receiver:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0",
        }
        server = ServerProcess(tmp_path, port, args=["--config", str(config)], env=otel).start()
        try:
            for _ in range(3):
                _post_with(server, admin, {"traceparent": GOOD})
        finally:
            assert server.stop() == 0  # exit sends whatever was queued
        assert receiver.spans == []
