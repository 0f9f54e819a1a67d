"""What an untrusted caller can send the telemetry: budgets that are not numbers a budget can
be, W3C trace headers that are malformed or huge, a model that reports no usage, a spent
budget dodged by continuing a finished task; and prompts kept off spans by default."""

from __future__ import annotations

import logging
import math
import uuid
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.support import telemetry_fixtures
from tests.support.telemetry_fixtures import demo_swarm

from mail.telemetry import tracing
from mail.telemetry.budget import MAX_TOKENS_TOTAL, Budget, BudgetError
from mail.telemetry.meter import CURRENT_TURN
from mail.telemetry.model_calls import observed
from mail.telemetry.usage import ModelCall, task_usage

PROMPT = "What is 6 times 7?"
spans = telemetry_fixtures.spans  # the fixture


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_cost": math.nan},  # never exceeded, and jsonb refuses it
        {"max_cost": math.inf},
        {"max_cost": 10**400},  # float() of it raised OverflowError: a 500
        {"max_cost": 10**5000},  # repr() of it raises ValueError
        {"max_cost": "0.5"},
        {"max_cost": -0.01},
        {"max_tokens_total": MAX_TOKENS_TOTAL + 1},
        {"max_tokens_total": 10**5000},
        {"max_tokens_total": 1.5},
        {"max_tokens_total": True},
    ],
)
def test_budgets_that_are_not_finite_bounded_numbers_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(BudgetError) as caught:
        Budget().merged(kwargs)
    assert caught.value.status == 400 and len(str(caught.value)) < 200


def test_the_largest_budgets_are_accepted() -> None:
    budget = Budget().merged({"max_tokens_total": MAX_TOKENS_TOTAL, "max_cost": 1e308})
    assert budget == Budget(MAX_TOKENS_TOTAL, 1e308)


def test_trace_headers_from_a_caller_are_bounded_and_never_logged(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    good = f"00-{trace_id}-{span_id}-01"
    parent = tracing.extract({"traceparent": good, "tracestate": "a=1"})
    assert parent is not None
    remote = trace.get_current_span(parent).get_span_context()
    assert f"{remote.trace_id:032x}" == trace_id and remote.trace_state.get("a") == "1"
    with caplog.at_level(logging.DEBUG):
        assert tracing.extract({"traceparent": good + "x" * 100_000}) is None
        # a huge tracestate is dropped, the traceparent still honoured
        parent = tracing.extract({"traceparent": good, "tracestate": "k=v," * 50_000})
        assert parent is not None
        context = trace.get_current_span(parent).get_span_context()
        assert context.trace_id == remote.trace_id and not context.trace_state
        for malformed in ("garbage", f"00-{'0' * 32}-{span_id}-01", f"zz-{trace_id}-{span_id}"):
            found = tracing.extract({"traceparent": malformed})
            assert found is None or not trace.get_current_span(found).get_span_context().is_valid
    assert not [r for r in caplog.records if "traceparent" in r.getMessage()]


class _Recorder:
    agent = "helper"

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []

    def record(self, call: ModelCall) -> None:
        self.calls.append(call)

    def call_started(self, call: Any) -> None:  # calls in flight (cut at a task timeout)
        pass

    def call_ended(self, call: Any) -> None:
        pass

    def admit(self) -> None:  # a request counted toward max_steps (no limit here)
        pass


async def _no_usage_reply(**_kwargs: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": "forty-two, " * 40}
    return {"choices": [{"message": message, "finish_reason": "stop"}]}


async def test_a_reply_without_usage_is_counted_both_ways() -> None:
    """A model server that reports no usage must not make a task free (budgets unbounded)."""
    turn = _Recorder()
    token = CURRENT_TURN.set(turn)  # type: ignore[arg-type]
    try:
        messages = [{"role": "user", "content": "x" * 4000}]
        await observed("chat", _no_usage_reply, {"model": "openai/local", "messages": messages})
    finally:
        CURRENT_TURN.reset(token)
    [call] = turn.calls
    assert call.estimated and call.input_tokens >= 1000 and call.output_tokens >= 110


async def test_a_finished_task_with_a_spent_budget_is_not_continued_past_it() -> None:
    swarm = demo_swarm()
    task_id = str(uuid.uuid4())
    try:
        await swarm.post_message(PROMPT, task_id=task_id)
        task = swarm.get_task_by_id(task_id)
        assert task is not None and task.state.value == "completed"
        usage = task_usage(task).as_dict()  # a delegated task: per agent adds up to the total
        assert set(usage["by_agent"]) == {"supervisor", "math"}
        for key in ("model_calls", "input_tokens", "output_tokens", "total_tokens"):
            assert sum(a[key] for a in usage["by_agent"].values()) == usage[key] > 0
        totals = task_usage(task).total
        spent_tokens, spent_calls = totals.total_tokens, totals.calls
        refused, _ = await swarm.post_message(
            "and times 8?", task_id=task_id, max_tokens_total=spent_tokens
        )
        assert refused["message"]["subject"] == "::task_error::"
        assert "budget" in refused["message"]["body"]
        assert task_usage(task).total.calls == spent_calls  # no turn ran
        answer, _ = await swarm.post_message(
            "and times 8?", task_id=task_id, max_tokens_total=spent_tokens * 100
        )
        assert answer["message"]["subject"] != "::task_error::"
        assert task_usage(task).total.calls > spent_calls
    finally:
        await swarm.shutdown()


async def test_prompts_and_answers_stay_off_spans_by_default(spans: InMemorySpanExporter) -> None:
    swarm = demo_swarm()
    try:
        await swarm.post_message(PROMPT, task_id=str(uuid.uuid4()))
    finally:
        await swarm.shutdown()
    finished = spans.get_finished_spans()
    assert any(s.name.startswith("chat ") for s in finished)
    for span in finished:
        for key, value in (span.attributes or {}).items():
            assert "6 times 7" not in str(value), (span.name, key)
            assert key not in ("gen_ai.input.messages", "gen_ai.tool.call.arguments")


def test_a_link_to_an_untrusted_callers_context_on_the_sdk_path(
    spans: InMemorySpanExporter,
) -> None:
    # The lean path is covered over HTTP (test_telemetry_lean_attacks); this is the SDK's.
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    caller = tracing.extract({"traceparent": f"00-{trace_id}-{span_id}-01"})
    span = tracing.start_span("POST /message", link=caller, kind="SERVER")
    tracing.end_span(span)
    [ended] = spans.get_finished_spans()
    assert f"{ended.context.trace_id:032x}" != trace_id and ended.parent is None
    [link] = ended.links
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (trace_id, span_id)
    # an invalid context adds no link
    bad = tracing.extract({"traceparent": f"00-{'0' * 32}-{span_id}-01"})
    tracing.end_span(tracing.start_span("GET /x", link=bad))
    assert spans.get_finished_spans()[-1].links == ()
