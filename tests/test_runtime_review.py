"""Action review in the runtime alone (stub agents): holding, resuming, state on the task."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mail.core.review import (
    HeldCall,
    ReviewDecisionError,
    ReviewPolicy,
    build_policy,
    edit_history_entry,
    parse_decisions,
)
from mail.core.runtime import MAILRuntime
from mail.core.runtime_review import ActionReviewer
from support.scripted_agents import (
    ScriptedAgent,
    events_named,
    incoming,
    run_task,
    task_complete,
    tool_call,
    tool_results,
    two_agent_runtime,
    user_message,
)

sent: list[dict[str, Any]] = []


async def _send_email(args: dict[str, Any]) -> str:
    sent.append(args)
    return f"sent to {args.get('to')}"


async def _lookup(args: dict[str, Any]) -> str:
    return "lookup done"


def review_runtime(
    script: list[Any], breakpoint_tools: list[str] | None = None, **policy: Any
) -> tuple[MAILRuntime, ScriptedAgent]:
    sent.clear()
    rt, sup, _ = two_agent_runtime(
        script,
        actions={"send_email": _send_email, "lookup": _lookup},
        breakpoint_tools=breakpoint_tools,
    )
    rt.review = ActionReviewer(
        rt,
        build_policy(
            {"send_email": ["accept", "edit", "ignore", "respond"], "lookup": None},
            {"supervisor": ["send_email", "lookup"], "worker": []},
            {},
            **policy,
        ),
    )
    return rt, sup


async def resume(rt: MAILRuntime, decisions: Any, task_id: str = "t1") -> Any:
    return await asyncio.wait_for(
        rt.run_task(
            user_message(task_id, ""), resume_from="action_review", timeout=5, decisions=decisions
        ),
        6,
    )


async def test_held_call_pauses_the_task_and_accept_runs_it() -> None:
    rt, sup = review_runtime(
        [
            [tool_call("send_email", {"to": "bob"}, call_id="c1")],
            [task_complete("done")],
        ]
    )
    paused = await run_task(rt)
    assert paused["message"]["subject"] == "::action_review::"
    held = json.loads(paused["message"]["body"])
    assert [h["tool_call_id"] for h in held] == ["c1"]
    assert held[0]["allowed_decisions"] == ["accept", "edit", "ignore", "respond"]
    assert sent == []
    task = rt.get_task_by_id("t1")
    assert task is not None and task.completed and not task.is_running
    assert task.to_dict()["pending_reviews"] == held
    [event] = events_named(rt, "t1", "action_review")
    assert json.loads(event.data)["extra_data"] == held[0]

    done = await resume(rt, [{"tool_call_id": "c1", "type": "accept"}])
    assert done["message"]["body"] == "done"
    assert sent == [{"to": "bob"}]
    assert "SUCCESS: sent to bob" in tool_results(sup.calls[1].history)
    assert task.to_dict()["pending_reviews"] == []
    [decision] = events_named(rt, "t1", "action_review_decision")
    assert json.loads(decision.data)["extra_data"]["type"] == "accept"


async def test_a_second_resume_is_refused_and_a_plain_message_too() -> None:
    rt, _ = review_runtime([[tool_call("send_email", {"to": "bob"}, call_id="c1")]])
    await run_task(rt)
    with pytest.raises(ReviewDecisionError, match="c1"):
        rt.review.validate("t1", [{"tool_call_id": "c1", "type": "nope"}])
    # A plain message can't skip the review.
    refused = await asyncio.wait_for(rt.run_task(user_message("t1", "hello"), timeout=5), 6)
    assert refused["message"]["subject"] == "::task_error::"
    assert "waiting for review" in refused["message"]["body"]
    rt.agents["supervisor"].function.script.append([task_complete("ok")])  # type: ignore[attr-defined]
    await resume(rt, [{"tool_call_id": "c1", "type": "ignore"}])
    with pytest.raises(ReviewDecisionError, match="already decided"):
        rt.review.validate("t1", [{"tool_call_id": "c1", "type": "accept"}])


async def test_ignore_ends_the_task_unless_the_swarm_says_otherwise() -> None:
    rt, sup = review_runtime([[tool_call("send_email", {"to": "bob"}, call_id="c1")]])
    await run_task(rt)
    ended = await resume(rt, [{"tool_call_id": "c1", "type": "ignore", "message": "no"}])
    assert ended["message"]["subject"] == "::task_complete::"
    assert "send_email" in ended["message"]["body"] and "c1" in ended["message"]["body"]
    assert len(sup.calls) == 1 and sent == []

    rt, sup = review_runtime(
        [[tool_call("send_email", {"to": "bob"}, call_id="c2")], [task_complete("carried on")]],
        ignore_ends_task=False,
    )
    await run_task(rt)
    done = await resume(rt, [{"tool_call_id": "c2", "type": "ignore"}])
    assert done["message"]["body"] == "carried on"
    assert any("rejected" in r for r in tool_results(sup.calls[1].history))


async def test_mixed_batch_runs_the_unreviewed_call_at_once() -> None:
    rt, sup = review_runtime(
        [
            [
                tool_call("lookup", {}, call_id="l1"),
                tool_call("send_email", {"to": "bob"}, call_id="c1"),
            ],
            [task_complete("done")],
        ]
    )
    paused = await run_task(rt)
    assert [h["tool_call_id"] for h in json.loads(paused["message"]["body"])] == ["c1"]
    history = rt.history_for("t1", "supervisor")
    assert tool_results(history) == ["SUCCESS: lookup done"]
    await resume(rt, [{"tool_call_id": "c1", "type": "edit", "args": {"to": "carol"}}])
    assert sent == [{"to": "carol"}]
    # One wake-up for the agent after the resume, not one per batch.
    assert len(sup.calls) == 2
    assert json.loads(sup.calls[1].history[1]["tool_calls"][1]["function"]["arguments"]) == {
        "to": "carol"
    }


def _reviewed_call_and_breakpoint(then: list[Any]) -> tuple[MAILRuntime, ScriptedAgent]:
    return review_runtime(
        [
            [
                tool_call("send_email", {"to": "bob"}, call_id="c1"),
                tool_call("human_review", {"question": "ok?"}, call_id="b1"),
            ],
            then,
        ],
        breakpoint_tools=["human_review"],
    )


async def test_a_breakpoint_next_to_a_reviewed_call_pauses_after_the_review() -> None:
    rt, sup = _reviewed_call_and_breakpoint([task_complete("done")])
    paused = await run_task(rt)
    assert paused["message"]["subject"] == "::action_review::"
    assert [h["tool_call_id"] for h in json.loads(paused["message"]["body"])] == ["c1"]
    assert events_named(rt, "t1", "breakpoint_tool_call") == []  # not yet: review comes first

    at_breakpoint = await resume(rt, [{"tool_call_id": "c1", "type": "accept"}])
    assert at_breakpoint["message"]["subject"] == "::breakpoint_tool_call::"
    [entry] = json.loads(at_breakpoint["message"]["body"])
    assert (entry["call_id"], entry["name"]) == ("b1", "human_review")
    assert sent == [{"to": "bob"}]
    assert len(sup.calls) == 1  # the agent waits for the breakpoint's result
    assert len(events_named(rt, "t1", "breakpoint_tool_call")) == 1
    task = rt.get_task_by_id("t1")
    assert task is not None and task.completed and task.pending_reviews == []

    done = await asyncio.wait_for(
        rt.run_task(
            user_message("t1", ""),
            resume_from="breakpoint_tool_call",
            breakpoint_tool_call_result="yes, go on",
            timeout=5,
        ),
        6,
    )
    assert done["message"]["body"] == "done"
    assert len(sup.calls) == 2
    assert tool_results(sup.calls[1].history) == ["SUCCESS: sent to bob", "yes, go on"]
    # The review's action notice waited with the task and reaches the agent now.
    assert any("::action_complete::" in m for m in incoming(sup.calls[1].history))


async def test_an_ignore_that_ends_the_task_drops_the_breakpoint_with_a_result() -> None:
    rt, sup = _reviewed_call_and_breakpoint([task_complete("unused")])
    await run_task(rt)
    ended = await resume(rt, [{"tool_call_id": "c1", "type": "ignore"}])
    assert ended["message"]["subject"] == "::task_complete::"
    assert events_named(rt, "t1", "breakpoint_tool_call") == []
    results = tool_results(sup.live_histories[0])
    assert len(results) == 2 and "rejected" in results[0]
    assert results[1].startswith("ERROR: not asked:")  # every call of the turn has a result
    assert rt.last_breakpoint_tool_calls.get("t1") is None


def test_parse_decisions_names_fields_and_call_ids() -> None:
    held = [
        HeldCall("a", "x", "send_email", {}, ["accept", "edit"], ""),
        HeldCall("b", "x", "ask", {}, ["respond", "ignore"], ""),
    ]
    with pytest.raises(ReviewDecisionError, match=r"no decision for held call\(s\) b"):
        parse_decisions([{"tool_call_id": "a", "type": "accept"}], held)
    with pytest.raises(ReviewDecisionError, match="'accept' is not allowed for call b"):
        parse_decisions(
            [{"tool_call_id": "a", "type": "accept"}, {"tool_call_id": "b", "type": "accept"}],
            held,
        )
    with pytest.raises(ReviewDecisionError, match=r"decisions\[0\].args"):
        parse_decisions([{"tool_call_id": "a", "type": "edit"}], held)
    with pytest.raises(ReviewDecisionError, match="call zz is not waiting"):
        parse_decisions([{"tool_call_id": "zz", "type": "accept"}], held)
    with pytest.raises(ReviewDecisionError, match=r"decisions\[1\].message"):
        parse_decisions(
            [{"tool_call_id": "a", "type": "accept"}, {"tool_call_id": "b", "type": "respond"}],
            held,
        )
    ok = parse_decisions(
        [
            {"tool_call_id": "b", "type": "respond", "message": "use Friday"},
            {"tool_call_id": "a", "type": "edit", "args": {"to": "z"}},
        ],
        held,
    )
    assert [(d.tool_call_id, d.type) for d in ok] == [("a", "edit"), ("b", "respond")]


def test_edit_history_entry_covers_the_three_provider_shapes() -> None:
    completion = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    edited = edit_history_entry(completion, "c", {"a": 1})
    assert edited["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert completion["tool_calls"][0]["function"]["arguments"] == "{}"  # not mutated
    item = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert edit_history_entry(item, "c", {"a": 1})["arguments"] == '{"a": 1}'
    block = {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "input": {}}]}
    assert edit_history_entry(block, "c", {"a": 1})["content"][0]["input"] == {"a": 1}
    assert edit_history_entry(item, "other", {"a": 1}) is item


def test_policy_overrides_and_validation() -> None:
    policy = build_policy(
        {"send_email": ["accept"], "ask": ["respond"]},
        {"a": ["send_email", "ask"], "b": ["send_email"]},
        {"a": {"send_email": []}},
    )
    assert policy.allowed("a", "send_email") is None
    assert policy.allowed("a", "ask") == ("respond",)
    assert policy.allowed("b", "send_email") == ("accept",)
    assert not ReviewPolicy().active


# ------------------------------------------------------------------------------ declarations
def _swarm_json(**changes: Any) -> dict[str, Any]:
    from support.review_swarm import review_swarms_json

    swarm = review_swarms_json("decl", "http://127.0.0.1:9/v1")
    for agent in swarm["agents"]:
        agent.update(changes.get(agent["name"], {}))
    for action in swarm["actions"]:
        action.update(changes.get(action["name"], {}))
    return swarm


def test_swarms_json_review_declarations_are_validated_with_suggestions() -> None:
    from mail import MAILSwarmTemplate

    with pytest.raises(ValueError, match="unknown review decision 'acept'.*Did you mean 'accept'"):
        MAILSwarmTemplate.from_swarms_json(_swarm_json(send_email={"review": ["acept"]}))
    with pytest.raises(ValueError, match="'review' must be a list"):
        MAILSwarmTemplate.from_swarms_json(_swarm_json(send_email={"review": "accept"}))
    bad_key = {"review_actions": {"send_emial": ["accept"]}}
    with pytest.raises(ValueError, match="unknown action 'send_emial'.*Did you mean 'send_email'"):
        MAILSwarmTemplate.from_swarms_json(_swarm_json(assistant=bad_key))
    with pytest.raises(ValueError, match="review_actions"):
        MAILSwarmTemplate.from_swarms_json(_swarm_json(assistant={"review_actions": ["x"]}))


def test_agent_override_and_round_trip() -> None:
    from mail import MAILSwarmTemplate

    template = MAILSwarmTemplate.from_swarms_json(
        _swarm_json(assistant={"review_actions": {"send_email": [], "lookup": ["accept"]}})
    )
    swarm = template.instantiate(user_id="u", print_llm_streams=False)
    policy = swarm.runtime.review.policy
    assert policy.allowed("assistant", "send_email") is None  # switched off for this agent
    assert policy.allowed("assistant", "lookup") == ("accept",)
    assert policy.allowed("assistant", "ask_question") == ("respond", "ignore")
    dumped = template.to_swarm_json()
    assert dumped["agents"][0]["review_actions"] == {"send_email": [], "lookup": ["accept"]}
    assert {a["name"]: a.get("review") for a in dumped["actions"]}["ask_question"] == [
        "respond",
        "ignore",
    ]
    again = MAILSwarmTemplate.from_swarms_json(dumped)
    assert again.agents[0].review_actions == template.agents[0].review_actions


def test_action_decorator_takes_review() -> None:
    from mail import action

    @action(description="Send it", parameters={"type": "object", "properties": {}}, review=["edit"])
    async def send(args: dict[str, Any]) -> str:
        return "ok"

    assert send.review == ["edit"]
    assert send.to_swarm_json()["review"] == ["edit"]
