"""Shared by the telemetry tests: an in-memory span exporter installed as the tracer, and the
demo swarm of the repository's swarms.json."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mail import MAILSwarmTemplate
from mail.telemetry import tracing

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def demo_swarm(**overrides: object) -> Any:
    template = MAILSwarmTemplate.from_swarm_json_file("demo", REPO / "swarms.json")
    for key, value in overrides.items():
        setattr(template, key, value)
    return template.instantiate(print_llm_streams=False)
