"""The default sampler, ``parentbased_always_on``, decided with less work per span."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import get_current_span

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind
    from opentelemetry.trace.span import TraceState

_SAMPLED = SamplingResult(Decision.RECORD_AND_SAMPLE)  # results are read, never changed
_DROPPED = SamplingResult(Decision.DROP)


class ParentBasedAlwaysOn(Sampler):
    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        # A sampled result carries the span's attributes (the SDK starts the span with the
        # result's attributes, not the ones it was asked about), as the SDK's samplers do.
        parent = get_current_span(parent_context).get_span_context()
        if not parent.is_valid:
            return (
                SamplingResult(Decision.RECORD_AND_SAMPLE, attributes) if attributes else _SAMPLED
            )
        state = parent.trace_state
        if parent.trace_flags.sampled:
            if attributes or state:
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, state or None)
            return _SAMPLED
        return SamplingResult(Decision.DROP, None, state) if state else _DROPPED

    def get_description(self) -> str:
        return (
            "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,"
            "remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,"
            "localParentNotSampled:AlwaysOffSampler}"
        )
