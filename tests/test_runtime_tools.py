"""Every MAIL tool path through a real MAILRuntime driven by scripted stub agents."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mail.core.tools import AgentToolCall
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    events_named,
    incoming,
    make_runtime,
    run_task,
    send_broadcast,
    send_interrupt,
    send_request,
    send_response,
    task_complete,
    tool_call,
    tool_results,
    two_agent_runtime,
    user_message,
)

# ------------------------------------------------------------------------------ sending


async def test_request_and_response_round_trip() -> None:
    rt, sup, wrk = two_agent_runtime(
        [[send_request("worker", "compute 2+2", "Math")], [task_complete("4")]],
        [[send_response("supervisor", "it is 4", "Answer")]],
    )
    response = await run_task(rt, body="what is 2+2?")
    assert response["message"]["body"] == "4"

    first = sup.calls[0]
    assert first.tool_choice == "required"
    assert '<from type="user">u1</from>' in first.last_content
    assert "<body>what is 2+2?</body>" in first.last_content

    seen = wrk.calls[0].last_content
    assert '<from type="agent">supervisor</from>' in seen
    assert "<subject>Math</subject>" in seen and "<body>compute 2+2</body>" in seen

    back = sup.calls[1].history
    assert tool_results(back) == ["SUCCESS: message sent"]
    assert '<from type="agent">worker</from>' in back[-1]["content"]
    assert "<body>it is 4</body>" in back[-1]["content"]

    sent = [e.extra_data["full_message"] for e in events_named(rt, "t1", "new_message")]
    types = [(m["msg_type"], m["message"]["sender"]["address"]) for m in sent]
    assert types == [
        ("request", "u1"),
        ("request", "supervisor"),
        ("response", "worker"),
        ("broadcast_complete", "supervisor"),
    ]
    assert sent[1]["message"]["recipient"] == {"address_type": "agent", "address": "worker"}
    # A response carries a fresh request_id, not the id of the request it answers.
    assert sent[2]["message"]["request_id"] != sent[1]["message"]["request_id"]


async def test_send_interrupt_reaches_the_target_as_an_interrupt() -> None:
    rt, _, wrk = two_agent_runtime(
        [[send_interrupt("worker", "halt now", "Stop")], [task_complete("ok")]],
        [[send_response("supervisor", "halted")]],
    )
    await run_task(rt)
    interrupts = [
        e.extra_data["full_message"]
        for e in events_named(rt, "t1", "new_message")
        if e.extra_data["full_message"]["msg_type"] == "interrupt"
    ]
    assert len(interrupts) == 1
    payload = interrupts[0]["message"]
    assert payload["recipients"] == [{"address_type": "agent", "address": "worker"}]
    assert payload["subject"] == "Stop" and "interrupt_id" in payload
    assert "<body>halt now</body>" in wrk.calls[0].last_content


async def test_send_broadcast_goes_to_every_other_agent_and_ignores_targets() -> None:
    sup = ScriptedAgent(
        "supervisor",
        [
            [
                tool_call(
                    "send_broadcast",
                    {"subject": "News", "body": "deploy at noon", "targets": ["a"]},
                )
            ],
            [task_complete("done")],
        ],
    )
    a = ScriptedAgent("a", [[tool_call("ignore_broadcast", {})]])
    b = ScriptedAgent("b", [[send_response("supervisor", "seen")]])
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["a", "b"], True),
            "a": AgentSpec(a, ["supervisor"]),
            "b": AgentSpec(b, ["supervisor"]),
        }
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    # `targets` named only `a`, but the broadcast went to [all]: both a and b saw it, the
    # sender did not.
    assert len(a.calls) == 1 and len(b.calls) == 1
    assert "<body>deploy at noon</body>" in a.calls[0].last_content
    assert "<body>deploy at noon</body>" in b.calls[0].last_content
    broadcasts = [
        e.extra_data["full_message"]
        for e in events_named(rt, "t1", "new_message")
        if e.extra_data["full_message"]["msg_type"] == "broadcast"
    ]
    assert {m["message"]["recipients"][0]["address"] for m in broadcasts} == {"all"}
    assert not any("deploy at noon" in c for c in incoming(sup.calls[1].history))


async def test_send_with_missing_argument_is_a_tool_call_error() -> None:
    rt, sup, _ = two_agent_runtime(
        [[tool_call("send_request", {"subject": "s", "body": "b"})], [task_complete("ok")]],
    )
    await run_task(rt)
    assert tool_results(sup.calls[1].history) == [
        "ERROR: error sending message: missing argument 'target'"
    ]
    assert "::tool_call_error::" in sup.calls[1].last_content
    assert any("missing" in e.description for e in events_named(rt, "t1", "agent_error"))


# ------------------------------------------------------------------------------ task_complete


async def test_task_complete_response_shape_and_events() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("the answer")]])
    response = await run_task(rt)
    payload = response["message"]
    assert response["msg_type"] == "broadcast_complete"
    assert payload["sender"] == {"address_type": "agent", "address": "supervisor"}
    assert payload["recipients"] == [{"address_type": "agent", "address": "all"}]
    assert payload["subject"] == "::task_complete::" and payload["body"] == "the answer"
    assert payload["sender_swarm"] == "testswarm"
    assert payload["recipient_swarms"] == ["testswarm"]
    names = [e.event for e in rt.get_task_events("t1")]
    # A non-stream submission records the final response as a `task_complete` event.
    assert names[-4:] == ["tool_call", "task_complete_call", "new_message", "task_complete"]
    assert rt.get_task_events("t1")[-1].description == "response: 'the answer'"
    last = rt.get_task_events("t1")[-2]
    assert last.description.startswith("task_complete response from supervisor:\n")
    assert last.extra_data["full_message"] == response
    assert events_named(rt, "t1", "task_complete_call")[0].description == (
        "agent supervisor called task_complete, full response to follow"
    )
    task = rt.get_task_by_id("t1")
    assert task is not None and task.completed and not task.is_running
    assert rt.response_messages["t1"] == response
    assistant, result = sup.live_histories[0][-2:]
    assert result == {
        "role": "tool",
        "name": "task_complete",
        "content": "SUCCESS: task completed",
        "tool_call_id": assistant["tool_calls"][0]["id"],
    }


async def test_task_complete_default_finish_message() -> None:
    rt, _, _ = two_agent_runtime([[task_complete(None)]])
    response = await run_task(rt)
    assert response["message"]["body"] == "Task completed successfully"


async def test_duplicate_task_complete_in_one_batch() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("first"), task_complete("second")]])
    response = await run_task(rt)
    assert response["message"]["body"] == "first"
    assert tool_results(sup.live_histories[0]) == [
        "SUCCESS: task completed",
        "SUCCESS: task already completed",
    ]
    dup = events_named(rt, "t1", "task_complete_call_duplicate")
    assert [e.description for e in dup] == [
        "agent supervisor called task_complete on already completed task"
    ]
    assert len(events_named(rt, "t1", "task_complete_call")) == 1


async def test_agent_without_can_complete_tasks_cannot_complete() -> None:
    rt, sup, wrk = two_agent_runtime(
        [[send_request("worker", "finish it")], [task_complete("supervisor finished")]],
        [[task_complete("worker finished")], [send_response("supervisor", "ok, reporting")]],
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "supervisor finished"
    assert response["message"]["sender"]["address"] == "supervisor"
    assert tool_results(wrk.calls[1].history) == [
        "ERROR: agent 'worker' is not allowed to complete tasks"
    ]
    assert "::tool_call_error::" in wrk.calls[1].last_content
    assert '<from type="system">testswarm</from>' in wrk.calls[1].last_content
    assert any(
        e.description == "agent worker called task_complete but cannot complete tasks"
        for e in events_named(rt, "t1", "agent_error")
    )
    assert len(events_named(rt, "t1", "task_complete_call")) == 1


# ------------------------------------------------------------------------------ broadcasts


async def test_acknowledge_broadcast_stores_it_in_memory() -> None:
    rt, _, wrk = two_agent_runtime(
        [[send_broadcast("The launch code is zebra-42", "Launch")], [task_complete("ok")]],
        [
            [
                tool_call("acknowledge_broadcast", {"note": "remember the launch code"}),
                send_response("supervisor", "noted"),
            ]
        ],
    )
    await run_task(rt)
    assert tool_results(wrk.live_histories[0])[0] == "SUCCESS: broadcast acknowledged"

    # Two entries, per the broadcast-tools spec: the broadcast as seen, then the ack + note.
    found = await rt.memory.search("worker", "launch code zebra-42 remember", limit=10)
    assert len(found) == 2
    by_role = {entry["value"]["role"]: entry["value"] for entry in found}
    assert all(entry["value"]["task_id"] == "t1" for entry in found)
    assert all(entry["namespace"] == ["worker_memory"] for entry in found)
    assert "The launch code is zebra-42" in by_role["user"]["content"]
    assert by_role["assistant"]["content"] == "<acknowledged broadcast/>\nremember the launch code"
    # Memory is per agent, and acknowledging sent nothing by itself.
    assert await rt.memory.search("supervisor", "zebra") == []
    assert await rt.memory.search("worker", "unrelated-term") == []
    from_worker = [
        e
        for e in events_named(rt, "t1", "new_message")
        if e.extra_data["full_message"]["message"]["sender"]["address"] == "worker"
    ]
    assert len(from_worker) == 1  # only the explicit send_response


async def test_acknowledge_without_note_stores_bare_marker() -> None:
    rt, _, _ = two_agent_runtime(
        [[send_broadcast("weather is nice")], [task_complete("ok")]],
        [[tool_call("acknowledge_broadcast", {}), send_response("supervisor", "k")]],
    )
    await run_task(rt)
    found = await rt.memory.search("worker", "weather acknowledged", limit=10)
    acks = [e["value"] for e in found if e["value"]["role"] == "assistant"]
    assert [e["content"] for e in acks] == ["<acknowledged broadcast/>"]


async def test_acknowledge_on_a_request_is_misuse_and_stores_nothing() -> None:
    rt, _, wrk = two_agent_runtime(
        [[send_request("worker", "secret plan")], [task_complete("ok")]],
        [[tool_call("acknowledge_broadcast", {"note": "x"})], [send_response("supervisor", "k")]],
    )
    await run_task(rt)
    assert tool_results(wrk.calls[1].history) == ["ERROR: improper use of `acknowledge_broadcast`"]
    assert "::tool_call_error::" in wrk.calls[1].last_content
    assert await rt.memory.search("worker", "") == []


async def test_acknowledge_on_an_interrupt_is_misuse() -> None:
    rt, _, wrk = two_agent_runtime(
        [[send_interrupt("worker", "urgent")], [task_complete("ok")]],
        [[tool_call("acknowledge_broadcast", {})], [send_response("supervisor", "k")]],
    )
    await run_task(rt)
    assert tool_results(wrk.calls[1].history) == ["ERROR: improper use of `acknowledge_broadcast`"]
    assert await rt.memory.search("worker", "urgent") == []


async def test_ignore_broadcast_stores_and_sends_nothing() -> None:
    rt, _, wrk = two_agent_runtime(
        [[send_broadcast("lunch menu"), send_request("worker", "real work")], [task_complete()]],
        [
            [
                tool_call("ignore_broadcast", {"reason": "irrelevant"}),
                send_response("supervisor", "work done"),
            ]
        ],
    )
    await run_task(rt)
    # Both arrive in one turn; the broadcast (tier 4) is shown before the request (tier 5).
    shown = [item["content"] for item in wrk.calls[0].history]
    assert "lunch menu" in shown[0] and "real work" in shown[1]
    assert tool_results(wrk.live_histories[0])[0] == "SUCCESS: broadcast ignored"
    assert [e.description for e in events_named(rt, "t1", "broadcast_ignored")] == [
        "agent worker called ignore_broadcast"
    ]
    assert await rt.memory.search("worker", "") == []


# ------------------------------------------------------------------------------ await / help


async def test_await_message_success_with_reason_and_later_calls_run() -> None:
    rt, sup, _ = two_agent_runtime(
        [
            [
                send_request("worker", "go"),
                tool_call("await_message", {"reason": "waiting for worker"}),
                tool_call("help", {"get_summary": False, "get_identity": True}),
            ],
            [tool_call("ignore_broadcast", {})],  # the ::help:: broadcast (system tier) first
            [task_complete("done")],
        ],
        [[send_response("supervisor", "result")]],
    )
    await run_task(rt)
    assert tool_results(sup.live_histories[0])[:3] == [
        "SUCCESS: message sent",
        "SUCCESS: waiting for a new message (reason: 'waiting for worker')",
        "SUCCESS: help string generated; will be sent to you in a subsequent prompt",
    ]
    [awaited] = events_named(rt, "t1", "await_message")
    assert awaited.description == "agent 'supervisor' is awaiting a new message: waiting for worker"
    assert awaited.extra_data == {"reason": "waiting for worker"}
    assert "::help::" in sup.calls[1].last_content


async def test_await_message_without_reason() -> None:
    rt, sup, _ = two_agent_runtime(
        [[send_request("worker", "go"), tool_call("await_message", {})], [task_complete()]],
        [[send_response("supervisor", "r")]],
    )
    await run_task(rt)
    assert tool_results(sup.live_histories[0])[1] == "SUCCESS: waiting for a new message"
    [awaited] = events_named(rt, "t1", "await_message")
    assert awaited.description == "agent 'supervisor' is awaiting a new message"
    assert awaited.extra_data == {}


async def test_await_message_error_does_not_end_the_turn() -> None:
    rt, sup, _ = two_agent_runtime(
        [[tool_call("await_message", {"reason": "nothing"}), task_complete("finished anyway")]]
    )
    response = await run_task(rt)
    # Ours: the batch continues after the error (the original ended the turn there).
    assert response["message"]["body"] == "finished anyway"
    assert tool_results(sup.live_histories[0]) == [
        "ERROR: no outstanding requests and message queue is empty",
        "SUCCESS: task completed",
    ]
    assert any(
        e.description == "agent supervisor called await_message but has no outstanding "
        "requests and message queue is empty"
        for e in events_named(rt, "t1", "agent_error")
    )
    # The ::tool_call_error:: notice was queued before completion and is now stashed.
    task = rt.get_task_by_id("t1")
    assert task is not None
    stashed = [i["message"]["message"]["subject"] for i in task.task_message_queue]
    assert stashed == ["::tool_call_error::"]


async def test_await_message_does_not_count_the_callers_own_finished_turn() -> None:
    # An instant agent (no model latency): its second turn starts before the first turn's
    # task has been reaped. That finished turn is not "something on its way", so the second
    # await_message must fail too, and the error notice gives the agent a third turn.
    sup = ScriptedAgent(
        "supervisor",
        [
            [tool_call("await_message", {"reason": "one"})],
            [tool_call("await_message", {"reason": "two"})],
            [task_complete("done")],
        ],
    )
    rt = make_runtime({"supervisor": AgentSpec(sup, can_complete_tasks=True)})
    response = await run_task(rt, timeout=5)
    assert response["message"]["body"] == "done"
    assert tool_results(sup.live_histories[-1]) == [
        "ERROR: no outstanding requests and message queue is empty",
        "ERROR: no outstanding requests and message queue is empty",
        "SUCCESS: task completed",
    ]
    assert events_named(rt, "t1", "await_message") == []


async def test_help_sends_a_help_broadcast_to_the_caller() -> None:
    rt, sup, _ = two_agent_runtime(
        [
            [tool_call("help", {"get_identity": True, "get_tool_help": ["send_request"]})],
            [task_complete("ok")],
        ]
    )
    await run_task(rt)
    assert events_named(rt, "t1", "help_called")[0].description == "agent supervisor called help"
    help_msg = [
        e.extra_data["full_message"]
        for e in events_named(rt, "t1", "new_message")
        if e.extra_data["full_message"]["message"]["subject"] == "::help::"
    ]
    assert len(help_msg) == 1
    payload = help_msg[0]["message"]
    assert help_msg[0]["msg_type"] == "broadcast"
    assert payload["sender"] == {"address_type": "system", "address": "testswarm"}
    assert payload["recipients"] == [{"address_type": "agent", "address": "supervisor"}]
    body = payload["body"]
    assert body.startswith("===== SUMMARY =====")
    assert "**Interswarm Address**: supervisor@testswarm" in body
    assert "===== Tool `send_request` =====" in body
    assert "::help::" in sup.calls[1].last_content


# ------------------------------------------------------------------------------ synthetic calls


def _said(text: str) -> AgentToolCall:
    return tool_call("text_output", {"content": text})


def _no_tool_call_events(rt: Any) -> list[Any]:
    return [
        e
        for e in events_named(rt, "t1", "agent_error")
        if e.extra_data.get("error_kind") == "no_tool_call"
    ]


async def test_plain_text_is_refused_with_a_notice_never_broadcast_to_peers() -> None:
    """A normal turn must call a tool: text is neither sent to the other agents (the worker
    is never called) nor lost; the agent is told, and its next answer counts."""
    rt, sup, wrk = two_agent_runtime(
        [[_said("thinking out loud")], [task_complete("ok")]],
        [[send_response("supervisor", "heard you")]],
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "ok"
    assert wrk.calls == []
    assert "::tool_call_error::" in sup.calls[1].last_content
    assert "Your reply was plain text" in sup.calls[1].last_content
    # The text stays in the agent's history, with no tool result of its own.
    assert tool_results(sup.calls[1].history) == []
    (event,) = _no_tool_call_events(rt)
    assert event.description == "agent supervisor answered in plain text"
    assert rt.mail_tasks["t1"].state.value == "completed"


async def test_an_empty_answer_is_refused_the_same_way() -> None:
    rt, sup, _ = two_agent_runtime([[], [task_complete("ok")]])
    response = await run_task(rt)
    assert response["message"]["body"] == "ok"
    assert "Your reply was empty" in sup.calls[1].last_content
    (event,) = _no_tool_call_events(rt)
    assert event.extra_data == {"error_kind": "no_tool_call", "agent": "supervisor"}


async def test_answers_without_a_tool_call_in_a_row_fail_the_task() -> None:
    rt, sup, _ = two_agent_runtime([[_said("a")], [], [_said("c")], [task_complete("never")]])
    response = await run_task(rt)
    assert len(sup.calls) == 3  # task_no_tool_call_limit (3): the third stops the task
    assert response["message"]["subject"] == "::task_error::"
    body = response["message"]["body"]
    assert "3 times in a row" in body and "task_no_tool_call_limit" in body, body
    assert rt.mail_tasks["t1"].state.value == "failed"
    (error,) = events_named(rt, "t1", "task_error")
    assert error.extra_data == {"error_kind": "no_tool_call"}


async def test_a_valid_call_starts_the_count_again() -> None:
    help_call = tool_call("help", {})
    rt, sup, _ = two_agent_runtime(
        [[_said("a")], [_said("b")], [help_call], [_said("c")], [], [task_complete("done")]]
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    assert len(_no_tool_call_events(rt)) == 4


async def test_a_forced_task_complete_not_called_ends_the_task_failed() -> None:
    """At the step limit the entrypoint must call task_complete: another call instead is
    not run (the worker never hears of it), gets an error result, and the task fails then
    (no turn beyond the limit's last one). With max_steps 1 that is the first turn, which
    gets the user's message and the order to finish together."""
    rt, sup, wrk = two_agent_runtime(
        [
            [send_request("worker", "second")],
            [task_complete("never")],
        ],
        [[send_response("supervisor", "never")]],
    )
    response = await run_task(rt, max_steps=1, body="What is 12 * 7?")
    assert response["message"]["subject"] == "::task_error::"
    assert "step limit" in response["message"]["body"]
    assert wrk.calls == []
    assert sup.tool_choices == [{"type": "function", "name": "task_complete"}]
    seen = [str(m.get("content")) for m in sup.calls[0].history]
    assert "What is 12 * 7?" in seen[-2] and "::maximum_steps_reached::" in seen[-1], seen
    assert tool_results(sup.live_histories[0])[-1].startswith("ERROR: not run: This turn had")
    (event,) = _no_tool_call_events(rt)
    assert "without calling task_complete" in event.description
    assert rt.mail_tasks["t1"].state.value == "failed"


async def test_builtin_tool_calls_emit_events_and_get_no_result() -> None:
    rt, sup, _ = two_agent_runtime(
        [
            [
                tool_call("web_search_call", {"query": "weather paris"}, style="responses"),
                tool_call("code_interpreter_call", {"code": "1+1"}, style="responses"),
                task_complete("done", style="responses"),
            ]
        ]
    )
    await run_task(rt)
    events = events_named(rt, "t1", "builtin_tool_call")
    assert [e.description for e in events] == [
        "agent supervisor used web_search with query: weather paris",
        "agent supervisor used code_interpreter",
    ]
    assert events[0].extra_data == {
        "tool_type": "web_search_call",
        "tool_args": {"query": "weather paris"},
    }
    assert tool_results(sup.live_histories[0]) == ["SUCCESS: task completed"]


# ------------------------------------------------------------------------------ actions


async def _lookup(args: dict[str, Any]) -> str:
    return f"looked up {args.get('q')}"


async def _boom(args: dict[str, Any]) -> str:
    raise RuntimeError("boom")


async def test_successful_action_result_and_action_complete_notice() -> None:
    rt, sup, _ = two_agent_runtime(
        [[tool_call("lookup", {"q": "cats"})], [task_complete("ok")]],
        actions={"lookup": _lookup},
    )
    await run_task(rt)
    assert tool_results(sup.calls[1].history) == ["SUCCESS: looked up cats"]
    notice = sup.calls[1].last_content
    assert "::action_complete::" in notice and "Action completed successfully" in notice
    [call_ev] = events_named(rt, "t1", "action_call")
    assert call_ev.description == (
        'agent supervisor executing action tool: lookup with args: {"q": "cats"}'
    )
    [done_ev] = events_named(rt, "t1", "action_complete")
    assert done_ev.description == "action complete (caller = supervisor):\nlooked up cats"


async def test_without_interswarm_an_action_named_like_an_interswarm_tool_runs() -> None:
    """v1.3 ran an action called discover_swarms or send_interswarm_broadcast in a swarm
    without interswarm (the names are the runtime's only where interswarm is on)."""
    for name in ("discover_swarms", "send_interswarm_broadcast"):
        rt, sup, _ = two_agent_runtime(
            [[tool_call(name, {"q": "peers"})], [task_complete("ok")]],
            actions={name: _lookup},
        )
        await run_task(rt)
        assert tool_results(sup.calls[1].history) == ["SUCCESS: looked up peers"], name


async def test_unknown_action_is_an_action_error() -> None:
    rt, sup, _ = two_agent_runtime(
        [[tool_call("nope", {})], [task_complete("ok")]], actions={"lookup": _lookup}
    )
    await run_task(rt)
    assert tool_results(sup.calls[1].history) == ["ERROR: action not found"]
    assert [e.description for e in events_named(rt, "t1", "action_error")] == [
        "action nope not found"
    ]
    notice = sup.calls[1].last_content
    assert "::action_error::" in notice and "Error: nope" in notice


async def test_action_not_granted_to_the_agent_is_an_action_error() -> None:
    rt, sup, _ = two_agent_runtime(
        [[tool_call("lookup", {"q": "x"})], [task_complete("ok")]],
        actions={"lookup": _lookup},
        supervisor_actions=[],
    )
    await run_task(rt)
    assert tool_results(sup.calls[1].history) == ["ERROR: agent cannot access action"]
    assert [e.description for e in events_named(rt, "t1", "action_error")] == [
        "agent supervisor cannot access action lookup"
    ]
    assert "::action_error::" in sup.calls[1].last_content
    assert events_named(rt, "t1", "action_call") == []


async def test_raising_action_becomes_an_action_error_and_runtime_survives() -> None:
    rt, sup, _ = two_agent_runtime(
        [[tool_call("boom", {}), tool_call("lookup", {"q": "y"})], [task_complete("ok")]],
        actions={"boom": _boom, "lookup": _lookup},
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "ok"
    assert tool_results(sup.calls[1].history) == [
        "ERROR: failed to execute action tool: boom",
        "SUCCESS: looked up y",
    ]
    notice = sup.calls[1].last_content
    # Ours: a failed action yields ::action_error:: (the original said ::action_complete::).
    assert "::action_error::" in notice
    assert "Error: boom\nfailed to execute action tool: boom" in notice
    assert "::action_complete::" not in notice


async def test_action_override_replaces_every_action() -> None:
    seen: list[AgentToolCall] = []

    async def override(call: AgentToolCall) -> Any:
        seen.append(call)
        if call.tool_name == "lookup":
            return "overridden"
        return {"content": "dict result"}

    rt, sup, _ = two_agent_runtime(
        [[tool_call("lookup", {"q": "a"}), tool_call("boom", {})], [task_complete("ok")]],
        actions={"lookup": _lookup, "boom": _boom},
    )
    await run_task(rt, action_override=override)
    assert [c.tool_name for c in seen] == ["lookup", "boom"]
    assert isinstance(seen[0], AgentToolCall) and seen[0].tool_args == {"q": "a"}
    assert tool_results(sup.calls[1].history) == ["SUCCESS: overridden", "SUCCESS: dict result"]
    assert "::action_complete::" in sup.calls[1].last_content


async def test_action_override_that_raises_is_reported() -> None:
    async def override(call: AgentToolCall) -> str:
        raise ValueError("override broke")

    rt, sup, _ = two_agent_runtime(
        [[tool_call("lookup", {})], [task_complete("ok")]], actions={"lookup": _lookup}
    )
    await run_task(rt, action_override=override)
    assert tool_results(sup.calls[1].history) == [
        "ERROR: failed to execute action override tool: override broke"
    ]
    assert "::action_error::" in sup.calls[1].last_content


async def test_tool_call_events_precede_handling_and_carry_ids() -> None:
    rt, _, _ = two_agent_runtime(
        [
            [
                tool_call("lookup", {"q": 1}, call_id="c-1"),
                task_complete("ok", call_id="c-2"),
            ]
        ],
        actions={"lookup": _lookup},
    )
    await run_task(rt)
    names = [e.event for e in rt.get_task_events("t1")]
    first_tool_call = names.index("tool_call")
    assert names[first_tool_call : first_tool_call + 3] == ["tool_call", "tool_call", "action_call"]
    calls = events_named(rt, "t1", "tool_call")
    assert [c.extra_data["tool_call_id"] for c in calls] == ["c-1", "c-2"]
    assert calls[0].extra_data["tool_args"] == {"q": 1}
    assert json.loads(calls[1].data)["extra_data"]["tool_name"] == "task_complete"


async def test_no_agent_turn_after_task_complete_for_a_same_batch_action_notice() -> None:
    rt, sup, _ = two_agent_runtime(
        [[tool_call("lookup", {"q": "z"}), task_complete("done")]],
        actions={"lookup": _lookup},
    )
    sup.default = [tool_call("ignore_broadcast", {})]
    loop = asyncio.create_task(rt.run_continuous())
    try:
        response = await asyncio.wait_for(rt.submit_and_wait(user_message("t1"), 5), 6)
        await asyncio.wait_for(rt.await_idle(), 2)
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)
    assert response["message"]["body"] == "done"
    # The task is over: the ::action_complete:: notice must not cost another agent call.
    assert len(sup.calls) == 1
