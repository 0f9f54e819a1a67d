"""One interswarm request: a CLIENT span whose context travels in ``traceparent``, and the
``mail_interswarm_requests`` counter per peer and outcome."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mail.telemetry import metrics, tracing


@contextmanager
def interswarm_hop(peer: str, url: str) -> Iterator[dict[str, str]]:
    """Yields the headers to add to the request (empty when tracing is off)."""
    headers: dict[str, str] = {}
    span = tracing.start_span(
        f"mail.interswarm {peer}",
        kind="CLIENT",
        attributes={"mail.peer": peer, "url.full": url},
    )
    token: Any = None
    if span is not None:
        token = tracing.attach(span)
        tracing.inject(headers)
    outcome = "ok"
    try:
        yield headers
    except BaseException as exc:
        outcome = "error"
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            outcome = f"http_{status}"
        if span is not None and span.is_recording():
            span.set_attribute("error.type", type(exc).__name__)
        raise
    finally:
        metrics.interswarm_request(peer, outcome)
        if span is not None:
            if span.is_recording():
                span.set_attribute("mail.interswarm.outcome", outcome)
            tracing.detach(token)
            tracing.end_span(span, None if outcome == "ok" else outcome)
