"""Span tree of a task whose turns hand over (issue 42): each tool span's parent is the turn
span of the agent that called it, every turn span's parent is the task's span, on the lean
and the SDK span paths. Passes on main as well (same tree expected)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mail.telemetry import tracing
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    make_runtime,
    run_task,
    send_request,
    send_response,
    task_complete,
    tool_call,
)


@pytest.fixture(params=[True, False], ids=["lean", "sdk"])
def exporter(request: pytest.FixtureRequest) -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracing.install(provider, lean=request.param)
    try:
        yield exported
    finally:
        tracing.shutdown()


async def test_tool_spans_belong_to_the_turn_that_ran_them(
    exporter: InMemorySpanExporter,
) -> None:
    async def note(args: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        return f"noted {args.get('who')}"

    sup = ScriptedAgent(
        "supervisor", [[send_request("w1", "go")], [task_complete("done")]], sleep=0.002
    )
    w1 = ScriptedAgent(
        "w1", [[tool_call("note", {"who": "w1"})], [send_request("w2", "go")]], sleep=0.002
    )
    w2 = ScriptedAgent(
        "w2",
        [[tool_call("note", {"who": "w2"})], [send_response("supervisor", "r")]],
        sleep=0.002,
    )
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["w1"], True),
            "w1": AgentSpec(w1, ["w2"], actions=["note"]),
            "w2": AgentSpec(w2, ["supervisor"], actions=["note"]),
        },
        {"note": note},
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    finished = exporter.get_finished_spans()
    index = {s.context.span_id: s for s in finished}
    [task] = [s for s in finished if s.name == "mail.task"]
    turns = [s for s in finished if s.name.startswith("invoke_agent ")]
    assert sorted(s.name for s in turns) == [
        "invoke_agent supervisor",
        "invoke_agent supervisor",
        "invoke_agent w1",
        "invoke_agent w1",
        "invoke_agent w2",
        "invoke_agent w2",
    ]
    for turn in turns:
        assert turn.parent is not None and turn.parent.span_id == task.context.span_id
    tools = [s for s in finished if s.name == "execute_tool note"]
    assert len(tools) == 2
    owners = []
    for tool in tools:
        assert tool.parent is not None
        parent = index[tool.parent.span_id]
        owners.append(parent.name)
        # the tool ran inside its turn's time
        assert parent.start_time <= tool.start_time <= tool.end_time <= parent.end_time
    assert sorted(owners) == ["invoke_agent w1", "invoke_agent w2"]
    assert {s.context.trace_id for s in finished} == {task.context.trace_id}
