"""Prometheus metrics (prometheus-client), in a registry of our own."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mail.telemetry.usage import ModelCall

logger = logging.getLogger("mail.telemetry")

_on = False
_metrics: dict[str, Any] = {}
REGISTRY: Any = None
_state_reader: Callable[[], dict[str, Any]] | None = None

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)

_L, _T = _LATENCY_BUCKETS, _TOKEN_BUCKETS

# key -> (name, help, labels, buckets: None for a counter, else a histogram's)
_DEFINITIONS: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...] | None]] = {
    "agent_calls": ("mail_agent_calls", "Agent turns started", ("agent",), None),
    "model_calls": ("mail_model_calls", "Model calls by outcome", ("model", "outcome"), None),
    "model_latency": ("mail_model_call_duration_seconds", "Model call latency", ("model",), _L),
    "model_tokens": ("mail_model_call_tokens", "Tokens per model call", ("model", "direction"), _T),
    "model_cost": ("mail_model_cost", "Model cost as LiteLLM prices it (USD)", ("model",), None),
    "task_answers": (
        "mail_task_answers",
        "Tasks answered, by the state they entered",
        ("state",),
        None,
    ),
    "http_latency": (
        "mail_http_request_duration_seconds",
        "HTTP request latency (to the response's first byte) per route",
        ("method", "route", "status"),
        _L,
    ),
    "interswarm": (
        "mail_interswarm_requests",
        "Interswarm requests sent, per peer and outcome",
        ("peer", "outcome"),
        None,
    ),
    "webhook_attempts": (
        "mail_webhook_attempts",
        "Push delivery attempts (webhooks, A2A push) by outcome",
        ("outcome",),
        None,
    ),
    "webhook_latency": (
        "mail_webhook_attempt_duration_seconds",
        "Push delivery attempt latency (to the answer's first bytes)",
        (),
        _L,
    ),
}


def enabled() -> bool:
    return _on


def enable() -> Any:
    """Create the registry and the metrics (once); returns the registry."""
    global _on, REGISTRY
    if REGISTRY is not None:
        _on = True
        return REGISTRY
    from prometheus_client import CollectorRegistry, Counter, Histogram

    REGISTRY = CollectorRegistry(auto_describe=True)
    for key, (name, doc, labels, buckets) in _DEFINITIONS.items():
        if buckets is None:
            _metrics[key] = Counter(name, doc, labels, registry=REGISTRY)
        else:
            _metrics[key] = Histogram(name, doc, labels, buckets=buckets, registry=REGISTRY)
    REGISTRY.register(_StateCollector())
    _on = True
    return REGISTRY


def disable() -> None:
    global _on
    _on = False


def set_state_reader(reader: Callable[[], dict[str, Any]] | None) -> None:
    """``reader()`` -> {"tasks": {state: n}, "mailbox_depth": n, "open_streams": n,
    "storage": [(store, degraded, pending writes, reason or None), ...]}."""
    global _state_reader
    _state_reader = reader


class _StateCollector:
    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            state = _state_reader() if _state_reader is not None else {}
        except Exception:  # noqa: BLE001 - the other metrics are still served
            logger.debug("metrics: the state reader failed", exc_info=True)
            state = {}
        tasks = GaugeMetricFamily("mail_tasks", "Tasks by state", labels=["state"])
        for name, count in sorted((state.get("tasks") or {}).items()):
            tasks.add_metric([name], count)
        yield tasks
        yield GaugeMetricFamily(
            "mail_mailbox_depth",
            "Messages queued in mailboxes",
            value=state.get("mailbox_depth", 0),
        )
        yield GaugeMetricFamily(
            "mail_open_event_streams", "Open SSE event streams", value=state.get("open_streams", 0)
        )
        storage = state.get("storage") or []
        degraded = GaugeMetricFamily(
            "mail_store_degraded",
            "1 while a store's writes are failing and being retried (reason: why), else 0",
            labels=["store", "reason"],
        )
        pending = GaugeMetricFamily(
            "mail_store_pending_writes",
            "Writes acknowledged but not yet stored, per store",
            labels=["store"],
        )
        for store, is_degraded, waiting, reason in storage:
            degraded.add_metric([store, reason or ""], 1 if is_degraded else 0)
            pending.add_metric([store], waiting)
        yield degraded
        yield pending
        yield GaugeMetricFamily(
            "mail_webhook_pending_deliveries",
            "Push deliveries waiting to be sent or retried",
            value=state.get("webhook_pending", 0),
        )
        yield GaugeMetricFamily(
            "mail_a2a_tasks_in_memory",
            "A2A tasks holding the SDK's in-memory machinery (running, or waiting for input "
            "until a2a_interrupted_task_timeout releases them)",
            value=state.get("a2a_in_memory", 0),
        )

    def describe(self) -> Iterable[Any]:
        return []


def render() -> tuple[bytes, str]:
    """(exposition text, its content type)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(enable()), CONTENT_TYPE_LATEST


# ------------------------------------------------------------------------------------------
# Recording (no-ops while off)


_children: dict[tuple[str, ...], Any] = {}


def _child(metric: str, *labels: str) -> Any:
    """The labelled child of a metric, cached (``labels()`` takes a lock on every call)."""
    key = (metric, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = _metrics[metric].labels(*labels)
    return child


def agent_call(agent: str) -> None:
    if _on:
        _child("agent_calls", agent).inc()


def model_call(call: ModelCall) -> None:
    if not _on:
        return
    model = call.model
    _child("model_calls", model, "error" if call.error else "ok").inc()
    _child("model_latency", model).observe(call.duration_ms / 1000.0)
    if not call.error:
        _child("model_tokens", model, "input").observe(call.input_tokens)
        _child("model_tokens", model, "output").observe(call.output_tokens)
        if call.cost:
            _child("model_cost", model).inc(call.cost)


def task_answered(state: str) -> None:
    if _on:
        _child("task_answers", state).inc()


def http_request(method: str, route: str, status: int, seconds: float) -> None:
    if _on:
        _child("http_latency", method, route, str(status)).observe(seconds)


def interswarm_request(peer: str, outcome: str) -> None:
    if _on:
        _child("interswarm", peer, outcome).inc()


def webhook_attempt(outcome: str, seconds: float) -> None:
    if _on:
        _child("webhook_attempts", outcome).inc()
        _metrics["webhook_latency"].observe(seconds)
