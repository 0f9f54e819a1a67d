"""Breakpoints and their two resume forms, user_response resumes and multi-turn tasks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mail.core.runtime import MAILRuntime
from support.scripted_agents import (
    events_named,
    run_task,
    send_request,
    send_response,
    task_complete,
    tool_call,
    tool_results,
    two_agent_runtime,
    user_message,
)

ran: list[dict[str, Any]] = []


async def _weather(args: dict[str, Any]) -> str:
    ran.append(args)
    return "weather from the action"


async def _lookup(args: dict[str, Any]) -> str:
    return "lookup done"


def breakpoint_runtime(script: list[Any], style: str = "completions") -> tuple[MAILRuntime, Any]:
    rt, sup, _ = two_agent_runtime(
        script,
        actions={"get_weather": _weather, "lookup": _lookup},
        breakpoint_tools=["get_weather"],
    )
    return rt, sup


async def resume(rt: MAILRuntime, task_id: str = "t1", **kwargs: Any) -> Any:
    return await asyncio.wait_for(
        rt.run_task(
            user_message(task_id, "ignored"),
            resume_from="breakpoint_tool_call",
            timeout=5,
            **kwargs,
        ),
        6,
    )


# ------------------------------------------------------------------------------ breakpoints


async def test_breakpoint_ends_the_task_with_the_call_description() -> None:
    ran.clear()
    rt, sup = breakpoint_runtime([[tool_call("get_weather", {"city": "Paris"}, call_id="bp-1")]])
    response = await run_task(rt)
    assert response["msg_type"] == "broadcast_complete"
    assert response["message"]["subject"] == "::breakpoint_tool_call::"
    assert response["message"]["sender"]["address_type"] == "system"
    entries = json.loads(response["message"]["body"])
    assert entries == [
        {
            "arguments": '{"city":"Paris"}',
            "call_id": "bp-1",
            "name": "get_weather",
            "type": "function_call",
            "id": "fc_bp-1",
            "status": "completed",
        }
    ]
    # Compact JSON, and the breakpoint action itself did not run nor get a result.
    assert response["message"]["body"] == json.dumps(entries, separators=(",", ":"))
    assert ran == []
    assert tool_results(sup.live_histories[0]) == []
    [event] = events_named(rt, "t1", "breakpoint_tool_call")
    assert event.description == (
        'agent supervisor used breakpoint tools get_weather with args: {"city": "Paris"}'
    )
    assert rt.last_breakpoint_caller["t1"] == "supervisor"
    assert rt.get_task_by_id("t1").completed  # type: ignore[union-attr]


async def test_responses_style_breakpoint_uses_the_raw_item_id() -> None:
    rt, _ = breakpoint_runtime(
        [[tool_call("get_weather", {"city": "Oslo"}, call_id="bp-r", style="responses")]]
    )
    response = await run_task(rt)
    [entry] = json.loads(response["message"]["body"])
    assert entry["id"] == "fc_raw_bp-r" and entry["call_id"] == "bp-r"


@pytest.mark.parametrize(
    "result",
    [{"content": "sunny, 25C"}, json.dumps({"content": "sunny, 25C"})],
    ids=["dict", "json-string"],
)
async def test_single_dict_resume(result: Any) -> None:
    rt, sup = breakpoint_runtime(
        [
            [tool_call("get_weather", {"city": "Paris"}, call_id="bp-1")],
            [task_complete("It is sunny in Paris")],
        ]
    )
    await run_task(rt)
    response = await resume(rt, breakpoint_tool_call_result=result)
    assert response["message"]["body"] == "It is sunny in Paris"
    resumed = sup.calls[1]
    assert resumed.tool_choice == "required"
    # The re-prompt adds no entry of its own: the injected tool result is the last entry.
    assert resumed.last == {
        "role": "tool",
        "name": "get_weather",
        "content": "sunny, 25C",
        "tool_call_id": "bp-1",
    }
    [event] = events_named(rt, "t1", "breakpoint_action_complete")
    assert event.description == "breakpoint action complete (caller = supervisor):\nsunny, 25C"
    assert not any(
        "::action_complete_broadcast::" in e.description
        for e in events_named(rt, "t1", "new_message")
    )
    assert rt.get_task_by_id("t1").completed  # type: ignore[union-attr]


@pytest.mark.parametrize("as_json", [False, True], ids=["list", "json-string"])
async def test_list_resume_matches_results_by_call_id(as_json: bool) -> None:
    rt, sup = breakpoint_runtime(
        [
            [
                tool_call("get_weather", {"city": "Paris"}, call_id="bp-1"),
                tool_call("get_weather", {"city": "Rome"}, call_id="bp-2"),
            ],
            [task_complete("both known")],
        ]
    )
    first = await run_task(rt)
    assert [e["call_id"] for e in json.loads(first["message"]["body"])] == ["bp-1", "bp-2"]
    result: Any = [
        {"call_id": "bp-2", "content": "rain in Rome"},
        {"call_id": "bp-1", "content": "sun in Paris"},
    ]
    if as_json:
        result = json.dumps(result)
    response = await resume(rt, breakpoint_tool_call_result=result)
    assert response["message"]["body"] == "both known"
    injected = {
        e["tool_call_id"]: e["content"] for e in sup.calls[1].history if e.get("role") == "tool"
    }
    assert injected == {"bp-1": "sun in Paris", "bp-2": "rain in Rome"}
    assert len(events_named(rt, "t1", "breakpoint_action_complete")) == 2


async def test_dict_resume_with_several_pending_calls_is_an_error() -> None:
    rt, sup = breakpoint_runtime(
        [
            [
                tool_call("get_weather", {"city": "A"}, call_id="a"),
                tool_call("get_weather", {"city": "B"}, call_id="b"),
            ],
            [task_complete("after list resume")],
        ]
    )
    await run_task(rt)
    bad = await resume(rt, breakpoint_tool_call_result={"content": "only one"})
    assert bad["message"]["subject"] == "::task_error::"
    assert "only one call response was provided" in bad["message"]["body"]
    assert len(sup.calls) == 1
    # The pending calls survive the failed attempt; a proper list resume still works.
    good = await resume(
        rt,
        breakpoint_tool_call_result=[
            {"call_id": "a", "content": "1"},
            {"call_id": "b", "content": "2"},
        ],
    )
    assert good["message"]["body"] == "after list resume"


@pytest.mark.parametrize(
    ("items", "fragments"),
    [
        (
            [{"call_id": "a", "content": "1"}, {"call_id": "zz", "content": "?"}],
            ["unknown call_id(s): zz", "no result for call_id(s): b"],
        ),
        ([{"call_id": "a", "content": "1"}], ["no result for call_id(s): b"]),
        ("plain text", ["2 breakpoint tool calls are waiting", "(a, b)"]),
        ([{"content": "no id"}, {"call_id": "b"}], ["breakpoint_tool_call_result[0]"]),
    ],
    ids=["unknown", "missing", "plain-text", "no-call-id"],
)
async def test_resume_with_unknown_or_missing_call_ids_is_refused(
    items: Any, fragments: list[str]
) -> None:
    rt, sup = breakpoint_runtime(
        [
            [
                tool_call("get_weather", {"city": "A"}, call_id="a"),
                tool_call("get_weather", {"city": "B"}, call_id="b"),
            ],
            [task_complete("after a good resume")],
        ]
    )
    await run_task(rt)
    bad = await resume(rt, breakpoint_tool_call_result=items)
    assert bad["message"]["subject"] == "::task_error::"
    for fragment in fragments:
        assert fragment in bad["message"]["body"]
    assert len(sup.calls) == 1  # nothing was injected, no agent turn ran
    assert not events_named(rt, "t1", "breakpoint_action_complete")
    good = await resume(
        rt,
        breakpoint_tool_call_result=[
            {"call_id": "b", "content": "2"},
            {"call_id": "a", "content": "1"},
        ],
    )
    assert good["message"]["body"] == "after a good resume"


async def test_a_second_resume_of_the_same_pause_is_a_conflict() -> None:
    rt, sup = breakpoint_runtime(
        [[tool_call("get_weather", {}, call_id="bp")], [task_complete("resumed once")]]
    )
    await run_task(rt)
    first = await resume(rt, breakpoint_tool_call_result={"content": "x"})
    assert first["message"]["body"] == "resumed once"
    for form in ({"content": "again"}, [{"call_id": "bp", "content": "again"}], "again"):
        again = await resume(rt, breakpoint_tool_call_result=form)
        assert again["message"]["subject"] == "::task_error::"
        assert "not paused at a breakpoint" in again["message"]["body"]
    assert len(sup.calls) == 2


async def test_plain_text_resume_becomes_the_single_call_result() -> None:
    rt, sup = breakpoint_runtime(
        [
            [tool_call("get_weather", {"city": "X"}, call_id="bp-x", style="responses")],
            [task_complete("ok", style="responses")],
        ]
    )
    await run_task(rt)
    await resume(rt, breakpoint_tool_call_result="not json at all")
    # Ours: the fallback result is tied to the call (the original dropped the call id).
    assert sup.calls[1].last == {
        "type": "function_call_output",
        "call_id": "bp-x",
        "output": "not json at all",
    }


async def test_other_calls_in_a_breakpoint_batch_still_run() -> None:
    rt, sup = breakpoint_runtime(
        [
            [
                tool_call("get_weather", {"city": "P"}, call_id="bp-1"),
                tool_call("lookup", {}, call_id="lk-1"),
            ],
            # The resume shows the breakpoint result and the action's notice in one turn.
            [task_complete("done")],
        ]
    )
    response = await run_task(rt)
    assert response["message"]["subject"] == "::breakpoint_tool_call::"
    assert [e["call_id"] for e in json.loads(response["message"]["body"])] == ["bp-1"]
    assert tool_results(sup.live_histories[0]) == ["SUCCESS: lookup done"]
    final = await resume(rt, breakpoint_tool_call_result={"content": "sunny"})
    assert final["message"]["body"] == "done"


async def test_breakpoint_caller_can_be_named_explicitly() -> None:
    rt, sup = breakpoint_runtime(
        [[tool_call("get_weather", {}, call_id="bp")], [task_complete("named")]]
    )
    await run_task(rt)
    rt.last_breakpoint_caller.clear()
    response = await resume(
        rt, breakpoint_tool_call_result={"content": "x"}, breakpoint_tool_caller="supervisor"
    )
    assert response["message"]["body"] == "named"


@pytest.mark.parametrize(
    ("task_id", "kwargs", "fragment"),
    [
        ("missing", {"breakpoint_tool_call_result": {"content": "x"}}, "task 'missing' not found"),
        ("t1", {}, "breakpoint_tool_call_result"),
        (
            "t1",
            {"breakpoint_tool_call_result": "x", "breakpoint_tool_caller": "nobody"},
            "no breakpoint tool caller",
        ),
    ],
)
async def test_breakpoint_resume_errors(
    task_id: str, kwargs: dict[str, Any], fragment: str
) -> None:
    rt, _ = breakpoint_runtime([[tool_call("get_weather", {}, call_id="bp")]])
    await run_task(rt)
    response = await resume(rt, task_id, **kwargs)
    assert response["msg_type"] == "broadcast_complete"
    assert response["message"]["subject"] == "::task_error::"
    assert fragment in response["message"]["body"]
    assert response["message"]["body"].startswith("The task encountered an error: ")


async def test_invalid_resume_from_is_a_task_error() -> None:
    rt, _, _ = two_agent_runtime([[task_complete("x")]])
    await run_task(rt)
    response = await asyncio.wait_for(
        rt.run_task(user_message("t1"), resume_from="sideways", timeout=5), 6
    )
    assert response["message"]["subject"] == "::task_error::"
    assert "sideways" in response["message"]["body"]


# ------------------------------------------------------------------------------ user_response


async def test_user_response_resume_continues_the_same_history() -> None:
    rt, sup, _ = two_agent_runtime(
        [[task_complete("Which city?")], [task_complete("Paris is sunny")]]
    )
    first = await run_task(rt, body="weather please")
    assert first["message"]["body"] == "Which city?"
    second = await asyncio.wait_for(
        rt.run_task(user_message("t1", "Paris"), resume_from="user_response", timeout=5), 6
    )
    assert second["message"]["body"] == "Paris is sunny"
    history = sup.calls[1].history
    assert "weather please" in history[0]["content"]
    assert history[1]["role"] == "assistant"
    assert history[2]["content"] == "SUCCESS: task completed"
    assert "<body>Paris</body>" in history[3]["content"]
    task = rt.get_task_by_id("t1")
    assert task is not None and task.completed
    assert len(events_named(rt, "t1", "task_complete_call")) == 2
    assert rt.response_messages["t1"] == second


async def test_user_response_for_unknown_task_is_a_task_error() -> None:
    rt, _, _ = two_agent_runtime([[task_complete("x")]])
    response = await asyncio.wait_for(
        rt.run_task(user_message("ghost"), resume_from="user_response", timeout=5), 6
    )
    assert response["message"]["subject"] == "::task_error::"
    assert response["message"]["body"] == "The task encountered an error: task 'ghost' not found."
    assert [e.event for e in rt.get_task_events("ghost")] == ["task_error"]


async def test_resume_restores_the_stashed_queue() -> None:
    rt, sup, wrk = two_agent_runtime(
        [
            [send_request("worker", "late work"), task_complete("first answer")],
            [tool_call("ignore_broadcast", {})],
            [task_complete("second answer")],
        ],
        [[send_response("supervisor", "late result")]],
    )
    await run_task(rt)
    task = rt.get_task_by_id("t1")
    assert task is not None
    assert [i["message"]["message"]["body"] for i in task.task_message_queue] == ["late work"]
    assert wrk.calls == []
    second = await asyncio.wait_for(
        rt.run_task(user_message("t1", "go on"), resume_from="user_response", timeout=5), 6
    )
    assert task.task_message_queue == []
    assert "late work" in wrk.calls[0].last_content
    assert second["message"]["body"] == "second answer"


async def test_reusing_a_task_id_without_resume_from_continues_the_task() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("turn one")], [task_complete("turn two")]])
    loop = asyncio.create_task(rt.run_continuous())
    try:
        first = await asyncio.wait_for(rt.submit_and_wait(user_message("t1", "q1"), 5), 6)
        second = await asyncio.wait_for(rt.submit_and_wait(user_message("t1", "q2"), 5), 6)
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)
    # Ours: the second message continues the task (the original hung until the timeout).
    assert first["message"]["body"] == "turn one"
    assert second["message"]["body"] == "turn two"
    contents = [e.get("content") for e in sup.calls[1].history]
    assert "<body>q1</body>" in contents[0] and "<body>q2</body>" in contents[-1]
    assert len(events_named(rt, "t1", "task_complete_call_duplicate")) == 0
