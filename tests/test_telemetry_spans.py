"""Spans of a task (in-memory exporter): delegation, an action, a breakpoint; and the
token accounting and budgets the same runs record."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    SamplingResult,
)
from tests.support import telemetry_fixtures
from tests.support.telemetry_fixtures import demo_swarm

from mail.telemetry import tracing
from mail.telemetry.usage import task_usage

spans = telemetry_fixtures.spans  # the fixture


def by_id(finished: tuple[ReadableSpan, ...]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in finished}


def ancestors(span: ReadableSpan, index: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None and span.parent.span_id in index:
        span = index[span.parent.span_id]
        names.append(span.name)
    return names


async def test_span_tree_of_a_delegating_task_with_an_action(
    spans: InMemorySpanExporter,
) -> None:
    swarm = demo_swarm()
    try:
        response, _ = await swarm.post_message(
            "What is the weather in Paris tomorrow?", task_id=str(uuid.uuid4())
        )
    finally:
        await swarm.shutdown()
    assert response["message"]["subject"] != "::task_error::", response
    finished = spans.get_finished_spans()
    index = by_id(finished)
    names = [s.name for s in finished]
    [task] = [s for s in finished if s.name == "mail.task"]
    assert task.attributes["mail.task.state"] == "completed"
    assert {s.context.trace_id for s in finished} == {task.context.trace_id}
    turns = [s for s in finished if s.name.startswith("invoke_agent ")]
    assert {"invoke_agent supervisor", "invoke_agent weather"} <= {s.name for s in turns}
    for turn in turns:
        assert turn.parent is not None and turn.parent.span_id == task.context.span_id
    chats = [s for s in finished if s.name == "chat mail/demo"]
    assert len(chats) == len(turns), names
    for chat in chats:
        assert index[chat.parent.span_id].name.startswith("invoke_agent ")  # type: ignore[union-attr]
        assert chat.attributes["gen_ai.request.model"] == "mail/demo"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.input.messages" not in chat.attributes  # no content unless opted in
    [action] = [s for s in finished if s.name == "execute_tool get_weather_forecast"]
    assert action.attributes["mail.tool.outcome"] == "ok"
    assert ancestors(action, index)[:2] == ["invoke_agent weather", "mail.task"]
    # MAIL tools answered on the spot are events on their turn's span, not spans.
    assert not [s for s in finished if s.name == "execute_tool send_request"], names
    delegations = [
        (turn, event)
        for turn in turns
        for event in turn.events
        if event.name == "execute_tool send_request"
    ]
    assert delegations, [(t.name, [e.name for e in t.events]) for t in turns]
    for turn, event in delegations:
        assert turn.name == "invoke_agent supervisor"
        assert event.attributes["gen_ai.tool.name"] == "send_request"
        assert event.attributes["mail.tool.outcome"] == "ok"
        assert event.attributes["gen_ai.tool.call.id"]
    completions = [e for t in turns for e in t.events if e.name == "execute_tool task_complete"]
    assert len(completions) == 1


async def test_breakpoint_ends_the_run_span_and_is_marked(spans: InMemorySpanExporter) -> None:
    swarm = demo_swarm(breakpoint_tools=["get_weather_forecast"])
    try:
        response, _ = await swarm.post_message(
            "What is the weather in Paris tomorrow?", task_id=str(uuid.uuid4())
        )
    finally:
        await swarm.shutdown()
    assert response["message"]["subject"] == "::breakpoint_tool_call::"
    finished = spans.get_finished_spans()
    index = by_id(finished)
    [task] = [s for s in finished if s.name == "mail.task"]
    assert task.attributes["mail.task.state"] == "waiting_for_breakpoint"
    [mark] = [s for s in finished if s.name == "mail.breakpoint"]
    assert tuple(mark.attributes["mail.breakpoint.tools"]) == ("get_weather_forecast",)
    assert ancestors(mark, index)[:2] == ["invoke_agent weather", "mail.task"]
    assert not [s for s in finished if s.name == "execute_tool get_weather_forecast"]


async def test_tokens_are_counted_per_agent_and_task_without_tracing() -> None:
    swarm = demo_swarm()
    task_id = str(uuid.uuid4())
    try:
        await swarm.post_message("What is 6 times 7?", task_id=task_id)
        task = swarm.get_task_by_id(task_id)
        assert task is not None
        usage = task_usage(task).as_dict()
    finally:
        await swarm.shutdown()
    calls = [e for e in task.events if e.event == "model_call"]
    assert usage["model_calls"] == len(calls) >= 3
    assert usage["input_tokens"] == sum(e.extra_data["input_tokens"] for e in calls) > 0
    assert usage["cost"] == 0.0
    assert set(usage["by_agent"]) == {"supervisor", "math"}
    assert usage["by_model"]["mail/demo"]["model_calls"] == len(calls)


async def test_a_budget_pauses_the_task_and_a_raised_one_continues_it() -> None:
    swarm = demo_swarm()
    task_id = str(uuid.uuid4())
    try:
        response, _ = await swarm.post_message(
            "What is 6 times 7?", task_id=task_id, max_tokens_total=1
        )
        assert response["message"]["subject"] == "::budget_exceeded::"
        task = swarm.get_task_by_id(task_id)
        assert task is not None and task.state.value == "waiting_for_budget"
        spent = task_usage(task).total.total_tokens
        # The supervisor's request to math, in flight when the task paused, is kept.
        held = [i["message"]["message"]["recipient"]["address"] for i in task.task_message_queue]
        assert "math" in held
        assert "max_tokens_total" in response["message"]["body"]
        # Continuing without a raise would pause again at once: refused.
        refused, _ = await swarm.post_message("go on", task_id=task_id, resume_from="user_response")
        assert refused["message"]["subject"] == "::task_error::"
        assert "budget" in refused["message"]["body"]
        response, _ = await swarm.post_message(
            "go on", task_id=task_id, resume_from="user_response", max_tokens_total=100_000
        )
        assert response["message"]["subject"] not in ("::budget_exceeded::", "::task_error::")
        assert task_usage(task).total.total_tokens > spent
        assert not task.task_message_queue or task.state.value == "completed"
    finally:
        await swarm.shutdown()


class CountingSampler(Sampler):
    """The SDK's parent-based sampler around a fixed root decision, counting its calls."""

    def __init__(self, sample_roots: bool) -> None:
        self.calls = 0
        self.inner = ParentBased(ALWAYS_ON if sample_roots else ALWAYS_OFF)

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        self.calls += 1
        return self.inner.should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return "counting"


@pytest.mark.parametrize("sampled", [True, False])
async def test_an_unsampled_task_costs_one_sampling_decision(sampled: bool) -> None:
    sampler = CountingSampler(sample_roots=sampled)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    swarm = demo_swarm()
    try:
        response, _ = await swarm.post_message(
            "What is the weather in Paris tomorrow?", task_id=str(uuid.uuid4())
        )
    finally:
        await swarm.shutdown()
        tracing.shutdown()
    assert response["message"]["subject"] != "::task_error::", response
    made = len(exporter.get_finished_spans())
    if sampled:  # every span asked the sampler (task, turns, model calls, the action)
        assert made >= 6 and sampler.calls == made
    else:  # the task's decision; its turns, calls and actions were never made
        assert made == 0 and sampler.calls == 1
