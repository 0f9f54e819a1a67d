"""Routing in the runtime: priority order, comm_targets, bad recipients, failures, step limit."""

from __future__ import annotations

import asyncio
from typing import Any

from mail.core.events import TaskEvent
from mail.core.message import (
    MAILMessage,
    create_address,
    create_agent_address,
    make_broadcast,
    make_interrupt,
    make_message,
    make_request,
)
from mail.core.observer import RuntimeObserver
from mail.core.system_messages import system_response
from mail.core.tasks import MAILTask
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    events_named,
    make_runtime,
    run_task,
    send_request,
    send_response,
    task_complete,
    tool_call,
    tool_results,
    two_agent_runtime,
    user_message,
)

IGNORE = [tool_call("ignore_broadcast", {})]


def agent_msg(kind: str, task: str, sender: str, to: str, subject: str) -> MAILMessage:
    frm = create_agent_address(sender)
    if kind == "broadcast":
        return make_message(
            make_broadcast(task, frm, [create_agent_address(to)], subject, ""), kind
        )
    if kind == "interrupt":
        return make_message(
            make_interrupt(task, frm, [create_agent_address(to)], subject, ""), kind
        )
    return make_message(make_request(task, frm, create_agent_address(to), subject, ""), kind)


def from_type(sender_type: str, sender: str, task: str, to: str, subject: str) -> MAILMessage:
    payload = make_request(
        task,
        create_address(sender, sender_type),
        create_agent_address(to),
        subject,
        "",  # type: ignore[arg-type]
    )
    return make_message(payload, "request")


class Recorder(RuntimeObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def event_added(self, task: MAILTask, event: TaskEvent) -> None:
        if event.event == "new_message":
            msg = event.extra_data["full_message"]
            self.seen.append((msg["message"]["subject"], msg["message"]["task_id"]))


def _shown_to(agent: ScriptedAgent, subject: str) -> str:
    """The incoming message with `subject` in the agent's last history (batched or not)."""
    found = [
        item["content"]
        for item in agent.calls[-1].history
        if item.get("role") == "user" and subject in str(item.get("content"))
    ]
    assert found, f"{subject} was never shown to {agent.name}"
    return str(found[-1])


async def _serve_until_idle(rt: Any) -> None:
    loop = asyncio.create_task(rt.run_continuous())
    await asyncio.sleep(0)
    await asyncio.wait_for(rt.await_idle(), 5)
    await rt.shutdown(grace_period=1)
    await asyncio.wait_for(loop, 2)


# ------------------------------------------------------------------------------ priority


async def test_runtime_serves_all_five_tiers_in_priority_order_fifo_within() -> None:
    a = ScriptedAgent("a", default=IGNORE)
    b = ScriptedAgent("b", default=IGNORE)
    rt = make_runtime({"a": AgentSpec(a, ["b"], True), "b": AgentSpec(b, ["a"])}, entrypoint="a")
    recorder = Recorder()
    rt.observer = recorder
    # Queued before the loop starts, deliberately in reverse priority order; each message
    # has its own task so the turns do not wait on each other.
    rt.submit(agent_msg("request", "t-5a", "b", "a", "agent-request-1"))
    rt.submit(agent_msg("response", "t-5b", "b", "a", "agent-response-2"))
    rt.submit(agent_msg("broadcast", "t-4", "b", "a", "agent-broadcast"))
    rt.submit(agent_msg("interrupt", "t-3", "b", "a", "agent-interrupt"))
    rt.submit(from_type("user", "u1", "t-2a", "a", "user-1"))
    rt.submit(from_type("admin", "root", "t-2b", "a", "admin-2"))
    rt.submit(from_type("user", "u1", "t-2c", "a", "user-3"))
    rt.submit(system_response("testswarm", "t-1", "a", "system-1", "sys"))
    await _serve_until_idle(rt)
    expected = [
        "system-1",
        "user-1",
        "admin-2",
        "user-3",
        "agent-interrupt",
        "agent-broadcast",
        "agent-request-1",
        "agent-response-2",
    ]
    assert [subject for subject, _ in recorder.seen] == expected
    # The agent's turns ran in that same order.
    subjects = [c.last_content.split("<subject>")[1].split("</subject>")[0] for c in a.calls]
    assert subjects == expected


async def test_within_one_task_interrupt_overtakes_queued_requests() -> None:
    """One message per turn: the interrupt's turn comes first."""
    rt, sup, wrk = two_agent_runtime(
        [
            [
                send_request("worker", "first request"),
                send_request("worker", "second request"),
                tool_call("send_interrupt", {"target": "worker", "subject": "I", "body": "urgent"}),
            ],
            [tool_call("ignore_broadcast", {})],
            [tool_call("ignore_broadcast", {})],
            [task_complete("ok")],
        ],
        [
            [send_response("supervisor", "r-int")],
            [send_response("supervisor", "r-1")],
            [send_response("supervisor", "r-2")],
        ],
        batch_delivery=False,
    )
    await run_task(rt)
    bodies = [c.last_content.split("<body>")[1].split("</body>")[0] for c in wrk.calls]
    assert bodies == ["urgent", "first request", "second request"]


async def test_batched_messages_are_shown_in_priority_order_fifo_within() -> None:
    """Batched delivery: one turn shows the interrupt first, then the requests in order."""
    rt, sup, wrk = two_agent_runtime(
        [
            [
                send_request("worker", "first request"),
                send_request("worker", "second request"),
                tool_call("send_interrupt", {"target": "worker", "subject": "I", "body": "urgent"}),
            ],
            [task_complete("ok")],
        ],
        [[send_response("supervisor", "all three")]],
    )
    await run_task(rt)
    assert len(wrk.calls) == 1
    shown = [_body(item["content"]) for item in wrk.calls[0].history]
    assert shown == ["urgent", "first request", "second request"]


def _body(content: str) -> str:
    return content.split("<body>")[1].split("</body>")[0]


# ------------------------------------------------------------------------------ comm_targets


async def test_send_to_agent_outside_comm_targets_is_rejected() -> None:
    sup = ScriptedAgent("supervisor", [[send_request("secret")], [task_complete("ok")]])
    secret = ScriptedAgent("secret", default=IGNORE)
    worker = ScriptedAgent("worker", default=IGNORE)
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["worker"], True),
            "worker": AgentSpec(worker, ["supervisor"]),
            "secret": AgentSpec(secret, ["supervisor"]),
        }
    )
    await run_task(rt)
    assert secret.calls == []
    assert tool_results(sup.calls[1].history) == [
        "ERROR: 'secret' is not one of your communication targets"
    ]
    notice = sup.calls[1].last_content
    assert "::invalid_recipient::" in notice and '<from type="system">testswarm</from>' in notice
    assert [e.description for e in events_named(rt, "t1", "agent_error")] == [
        "agent attempted to contact disallowed recipients: ['secret']"
    ]


async def test_delivery_enforces_comm_targets_for_directly_queued_agent_messages() -> None:
    sup = ScriptedAgent("supervisor", [[task_complete("ok")]], default=IGNORE)
    secret = ScriptedAgent("secret", default=IGNORE)
    rt = make_runtime(
        {"supervisor": AgentSpec(sup, ["worker"], True), "secret": AgentSpec(secret, ["x"])}
    )
    rt.submit(user_message("t1", "start"))  # creates the task; handled first (tier 2)
    rt.submit(agent_msg("request", "t1", "supervisor", "secret", "sneaky"))
    await _serve_until_idle(rt)
    assert secret.calls == []
    errors = [e.description for e in events_named(rt, "t1", "agent_error")]
    assert errors == ["agent attempted to contact disallowed recipients: ['secret']"]


async def test_broadcasts_skip_the_comm_targets_check() -> None:
    sup = ScriptedAgent(
        "supervisor",
        [[tool_call("send_broadcast", {"subject": "s", "body": "hello all", "targets": []})]],
        default=[task_complete("ok")],
    )
    outsider = ScriptedAgent("outsider", [[send_response("supervisor", "got it")]])
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["worker"], True),
            "worker": AgentSpec(ScriptedAgent("worker", default=IGNORE), ["supervisor"]),
            "outsider": AgentSpec(outsider, ["supervisor"]),
        }
    )
    await run_task(rt)
    assert "hello all" in outsider.calls[0].last_content


# ------------------------------------------------------------------------------ bad recipients


async def test_send_tool_to_unknown_recipient_fails_with_invalid_recipient() -> None:
    # Ours (docs/differences.md "comm_targets tool result"): the send tool itself reports the
    # unknown agent, and the follow-up notice is ::invalid_recipient::.
    sup = ScriptedAgent("supervisor", [[send_request("ghost")], [task_complete("ok")]])
    rt = make_runtime({"supervisor": AgentSpec(sup, ["ghost"], True)})
    response = await run_task(rt)
    assert response["message"]["body"] == "ok"
    [result] = tool_results(sup.calls[1].history)
    assert result.startswith("ERROR: There is no agent called 'ghost' in this swarm")
    notice = sup.calls[1].last_content
    assert "<subject>::invalid_recipient::</subject>" in notice
    assert "There is no agent called 'ghost'" in notice
    assert any(
        e.description == "agent ghost is unknown; message from supervisor cannot be delivered to it"
        for e in events_named(rt, "t1", "agent_error")
    )


async def test_unknown_recipient_of_a_direct_agent_message_notifies_the_sender() -> None:
    sup = ScriptedAgent("supervisor", [[tool_call("ignore_broadcast", {})], [task_complete("k")]])
    rt = make_runtime({"supervisor": AgentSpec(sup, ["ghost"], True)})
    rt.submit(user_message("t1", "start"))
    rt.submit(agent_msg("request", "t1", "supervisor", "ghost", "lost"))
    await _serve_until_idle(rt)
    notice = _shown_to(sup, "::agent_error::")
    assert "There is no agent called 'ghost'" in notice


async def test_user_message_to_unknown_agent_ends_the_task() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("never")]])
    response = await asyncio.wait_for(
        rt.run_task(user_message("t1", "hi", to="nobody"), timeout=5), 6
    )
    assert response["msg_type"] == "broadcast_complete"
    assert response["message"]["subject"] == "::agent_error::"
    assert "'nobody'" in response["message"]["body"]
    assert sup.calls == []


async def test_agent_replying_to_the_user_id_is_told_to_use_task_complete() -> None:
    rt, sup, _ = two_agent_runtime(
        [[send_response("u1", "here is your answer")], [task_complete("ok")]]
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "ok"
    notice = sup.calls[1].last_content
    assert "::improper_response_to_user::" in notice
    assert "task_complete" in notice
    [result] = tool_results(sup.calls[1].history)
    assert result.startswith("ERROR: ") and "task_complete" in result
    assert any(
        e.description == "agent supervisor attempted to send a message to the user (u1)"
        for e in events_named(rt, "t1", "agent_error")
    )


async def test_send_tool_to_the_swarm_name_is_rejected_and_the_task_goes_on() -> None:
    rt, sup, _ = two_agent_runtime([[send_request("testswarm")], [task_complete("still going")]])
    response = await run_task(rt)
    assert response["message"]["body"] == "still going"
    assert tool_results(sup.calls[1].history) == [
        "ERROR: 'testswarm' is the swarm itself, not an agent"
    ]
    notice = sup.calls[1].last_content
    assert "<subject>::invalid_recipient::</subject>" in notice
    assert "name of this swarm" in notice


async def test_delivery_to_the_user_id_sends_improper_response_to_user() -> None:
    sup = ScriptedAgent("supervisor", [[tool_call("ignore_broadcast", {})], [task_complete("k")]])
    rt = make_runtime({"supervisor": AgentSpec(sup, ["u1"], True)})
    rt.submit(user_message("t1", "start"))
    rt.submit(agent_msg("response", "t1", "supervisor", "u1", "to the user"))
    await _serve_until_idle(rt)
    assert "'u1'" in _shown_to(sup, "::improper_response_to_user::")
    assert any(
        e.description == "agent supervisor attempted to send a message to the user (u1)"
        for e in events_named(rt, "t1", "agent_error")
    )


async def test_user_message_to_the_swarm_name_ends_with_runtime_error() -> None:
    rt, sup, _ = two_agent_runtime([[task_complete("never")]])
    response = await asyncio.wait_for(
        rt.run_task(user_message("t1", "hi", to="testswarm"), timeout=5), 6
    )
    assert response["message"]["subject"] == "::runtime_error::"
    assert response["msg_type"] == "broadcast_complete"
    assert "testswarm" in response["message"]["body"]
    assert sup.calls == []
    assert any("is the swarm name" in e.description for e in events_named(rt, "t1", "task_error"))


async def test_agent_message_to_the_swarm_name_ends_the_task() -> None:
    sup = ScriptedAgent("supervisor", [[tool_call("ignore_broadcast", {})]], default=IGNORE)
    rt = make_runtime({"supervisor": AgentSpec(sup, ["testswarm"], True)})
    future = asyncio.ensure_future(rt.run_task(user_message("t1", "start"), timeout=5))
    await asyncio.sleep(0.05)
    rt.submit(agent_msg("request", "t1", "supervisor", "testswarm", "to the swarm"))
    response = await asyncio.wait_for(future, 6)
    assert response["message"]["subject"] == "::runtime_error::"


# ------------------------------------------------------------------------------ failures


async def test_entrypoint_exception_on_user_message_ends_task_and_runtime_keeps_serving() -> None:
    sup = ScriptedAgent(
        "supervisor", [RuntimeError("model exploded"), [task_complete("second task ok")]]
    )
    rt = make_runtime({"supervisor": AgentSpec(sup, ["worker"], True)})
    loop = asyncio.create_task(rt.run_continuous())
    try:
        first = await asyncio.wait_for(rt.submit_and_wait(user_message("t1"), timeout=5), 6)
        assert first["msg_type"] == "broadcast_complete"
        assert first["message"]["subject"] == "::agent_error::"
        assert "model exploded" in first["message"]["body"]
        assert [e.description for e in events_named(rt, "t1", "agent_error")] == [
            "error scheduling message for agent supervisor: model exploded"
        ]
        second = await asyncio.wait_for(rt.submit_and_wait(user_message("t2"), timeout=5), 6)
        assert second["message"]["body"] == "second task ok"
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)


async def test_worker_exception_notifies_the_requesting_agent() -> None:
    rt, sup, wrk = two_agent_runtime(
        [[send_request("worker", "do it")], [task_complete("recovered")]],
        [ValueError("worker crashed")],
    )
    response = await run_task(rt)
    assert response["message"]["body"] == "recovered"
    notice = sup.calls[1].last_content
    assert "::agent_error::" in notice and "worker crashed" in notice
    assert '<from type="system">testswarm</from>' in notice


async def test_failing_tool_handler_marks_the_call_in_progress() -> None:
    # `get_tool_help` must be a list; an int makes the help handler raise mid-turn.
    rt, sup, _ = two_agent_runtime([[tool_call("help", {"get_tool_help": 5})]])
    response = await run_task(rt)
    assert response["message"]["subject"] == "::agent_error::"
    last = sup.live_histories[0][-1]
    assert last["role"] == "tool"
    assert last["content"].startswith("ERROR: failed to schedule message: ")


async def test_agent_messages_for_a_completed_task_are_dropped() -> None:
    slow = ScriptedAgent("slow", [[send_response("supervisor", "late")]], sleep=0.1)
    fast = ScriptedAgent("fast", [[send_response("supervisor", "quick")]])
    sup = ScriptedAgent(
        "supervisor",
        [[send_request("slow"), send_request("fast")], [task_complete("done early")]],
    )
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["slow", "fast"], True),
            "slow": AgentSpec(slow, ["supervisor"]),
            "fast": AgentSpec(fast, ["supervisor"]),
        }
    )
    loop = asyncio.create_task(rt.run_continuous())
    try:
        response = await asyncio.wait_for(rt.submit_and_wait(user_message("t1"), timeout=5), 6)
        assert response["message"]["body"] == "done early"
        await asyncio.wait_for(rt.await_idle(), 2)
        assert len(slow.calls) == 1
        assert len(sup.calls) == 2  # the late response was not delivered
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)


# ------------------------------------------------------------------------------ step limit


async def _lookup(args: dict[str, Any]) -> str:
    return "lookup output"


async def test_step_limit_replaces_messages_and_forces_task_complete() -> None:
    rt, sup, wrk = two_agent_runtime(
        [
            [tool_call("lookup", {}), send_request("worker", "work")],
            [task_complete("forced answer")],
        ],
        [[send_response("supervisor", "worker result")]],
        actions={"lookup": _lookup},
    )
    response = await run_task(rt, max_steps=3)
    assert response["message"]["body"] == "forced answer"
    # Steps: the user message (1), the request (2), the ::action_complete:: notice that
    # started a model call (3): the limit, so that call is the last, with the order to
    # finish beside the notice; the worker's response (4) is replaced.
    assert len(sup.calls) == 2 and len(wrk.calls) <= 1  # the task may end before its turn
    limit_call = sup.calls[1]
    assert limit_call.tool_choice == {"type": "function", "name": "task_complete"}
    assert sup.calls[0].tool_choice == "required"
    text = limit_call.last_content
    assert "::action_complete" in str(limit_call.history[-2].get("content"))
    assert "<subject>::maximum_steps_reached::</subject>" in text
    assert '<from type="system">testswarm</from>' in text
    assert "worker result" not in text.split("Here is what happened")[0]
    assert "--- Event 1 ---" in text and '"event": "new_message"' in text
    assert '"event": "action_output"' in text and '"event": "action_complete"' not in text


async def test_every_model_call_counts_toward_the_step_limit() -> None:
    """Turns started by the runtime's notices count too: an agent calling an action on and
    on (each result an ::action_complete:: notice) is told to finish after max_steps."""
    rt, sup, _ = two_agent_runtime(
        [[tool_call("lookup", {})]] * 2 + [[task_complete("forced answer")]],
        actions={"lookup": _lookup},
    )
    response = await run_task(rt, max_steps=3)
    assert response["message"]["body"] == "forced answer"
    # The user's message (1) and two action results (2, 3): the second result's turn is
    # the third and last model call, told to finish.
    assert len(sup.calls) == 3
    assert sup.calls[2].tool_choice == {"type": "function", "name": "task_complete"}


async def test_a_text_only_model_stays_within_max_steps_without_the_answer_limit() -> None:
    rt, sup, _ = two_agent_runtime([])
    sup.default = [tool_call("text_output", {"content": "hm"})]
    rt.loop_guard.max_no_tool_calls = None  # task_no_tool_call_limit = 0
    response = await run_task(rt, max_steps=3)
    assert response["message"]["subject"] == "::task_error::"
    assert "step limit" in response["message"]["body"]
    # Three counted steps, the third the step limit's forced turn, which did not finish.
    assert len(sup.calls) == 3
    assert sup.calls[2].tool_choice == {"type": "function", "name": "task_complete"}
    assert rt.mail_tasks["t1"].state.value == "failed"


async def test_step_limit_from_submit_kwargs_and_invalid_value() -> None:
    rt, sup, _ = two_agent_runtime(
        [[send_request("worker", "w")], [task_complete("limited")]],
        [[send_response("supervisor", "r")]],
    )
    loop = asyncio.create_task(rt.run_continuous())
    try:
        response = await asyncio.wait_for(
            rt.submit_and_wait(user_message("t1"), timeout=5, max_steps="2"), 6
        )
        assert response["message"]["body"] == "limited"
        assert "::maximum_steps_reached::" in sup.calls[1].last_content
        bad = await asyncio.wait_for(
            rt.submit_and_wait(user_message("t2"), timeout=5, max_steps="lots"), 6
        )
        assert bad["message"]["subject"] == "::task_error::"
        assert "max_steps must be an int or null" in bad["message"]["body"]
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)


async def test_no_step_limit_by_default() -> None:
    script: list[Any] = [[send_request("worker", f"r{i}")] for i in range(6)]
    script.append([task_complete("long task")])
    rt, _, _ = two_agent_runtime(script, [[send_response("supervisor", "ok")]] * 6)
    response = await run_task(rt)
    assert response["message"]["body"] == "long task"


async def test_remote_target_without_interswarm_is_reported_to_the_sender() -> None:
    sup = ScriptedAgent("supervisor", [[send_request("agent@faraway")], [task_complete("ok")]])
    rt = make_runtime({"supervisor": AgentSpec(sup, ["agent@faraway"], True)})
    response = await run_task(rt)
    assert response["message"]["body"] == "ok"
    notice = sup.calls[1].last_content
    assert "::agent_error::" in notice and "agent@faraway" in notice
    assert any(
        "interswarm is not enabled" in e.description for e in events_named(rt, "t1", "agent_error")
    )


async def test_system_notices_for_a_completed_task_do_not_start_new_turns() -> None:
    # `slow` is mid-turn when the supervisor completes the task; its misuse of
    # acknowledge_broadcast produces a ::tool_call_error:: after completion. The task is
    # over, so that notice must not cost another agent (LLM) call.
    slow = ScriptedAgent("slow", [[tool_call("acknowledge_broadcast", {})]], default=IGNORE)
    slow.sleep = 0.1
    fast = ScriptedAgent("fast", [[send_response("supervisor", "quick")]])
    sup = ScriptedAgent(
        "supervisor",
        [[send_request("slow"), send_request("fast")], [task_complete("done early")]],
        default=IGNORE,
    )
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["slow", "fast"], True),
            "slow": AgentSpec(slow, ["supervisor"]),
            "fast": AgentSpec(fast, ["supervisor"]),
        }
    )
    loop = asyncio.create_task(rt.run_continuous())
    try:
        response = await asyncio.wait_for(rt.submit_and_wait(user_message("t1"), timeout=5), 6)
        await asyncio.sleep(0.15)
        await asyncio.wait_for(rt.await_idle(), 2)
    finally:
        await rt.shutdown(grace_period=1)
        await asyncio.wait_for(loop, 2)
    assert response["message"]["body"] == "done early"
    assert len(slow.calls) == 1
    assert len(sup.calls) == 2
