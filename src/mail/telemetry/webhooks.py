"""One push delivery attempt: a CLIENT span (when tracing is on) and the metrics by outcome.

The span names the destination's host:port only: never the URL, headers or body.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mail.telemetry import metrics, tracing


class AttemptRecord:
    """Filled in by the caller: the outcome and latency the span and metrics report."""

    __slots__ = ("outcome", "seconds", "status")

    def __init__(self) -> None:
        self.outcome = "error"
        self.seconds = 0.0
        self.status: int | None = None


@contextmanager
def delivery_attempt(
    delivery_id: str, subscription_id: str, event_type: str, destination: str, attempt: int
) -> Iterator[AttemptRecord]:
    record = AttemptRecord()
    span = tracing.start_span(
        "mail.webhook.attempt",
        kind="CLIENT",
        attributes={
            "mail.webhook.delivery_id": delivery_id,
            "mail.webhook.subscription_id": subscription_id,
            "mail.webhook.event_type": event_type,
            "mail.webhook.attempt": attempt,
            "server.address": destination,
        },
    )
    token: Any = tracing.attach(span) if span is not None else None
    try:
        yield record
    finally:
        metrics.webhook_attempt(record.outcome, record.seconds)
        if span is not None:
            if span.is_recording():
                span.set_attribute("mail.webhook.outcome", record.outcome)
                if record.status is not None:
                    span.set_attribute("http.response.status_code", record.status)
            tracing.detach(token)
            tracing.end_span(span, None if record.outcome == "delivered" else record.outcome)
