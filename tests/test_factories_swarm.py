"""A whole task through a MAILSwarm whose agents are LiteLLM agent functions.

user -> supervisor (send_request) -> math (calculate_expression action) -> math
(send_response) -> supervisor (task_complete), every model turn answered by the scripted
provider over HTTP.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.examples.math_dummy.actions import get_actions
from mail.factories import LiteLLMAgentFunction, RetryPolicy
from support.scripted_llm import (
    ScriptedLLM,
    ScriptedRequest,
    error,
    reasoning,
    reply,
    text,
    tool_call,
)

MODELS = {"completions": "openai/gpt-4o-mini", "responses": "openai/gpt-5-mini"}


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        LiteLLMAgentFunction, "retry_policy", RetryPolicy(base_delay=0.01, max_delay=0.02)
    )


@pytest.fixture
async def llm():
    async with ScriptedLLM() as server:
        yield server


def _template(llm: ScriptedLLM, tool_format: str) -> MAILSwarmTemplate:
    common = {
        "llm": MODELS[tool_format],
        "use_proxy": False,
        "api_base": llm.base_url,
        "api_key": "test-key",
    }
    math_actions = get_actions()
    supervisor = MAILAgentTemplate(
        name="supervisor",
        factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
        comm_targets=["math"],
        actions=[],
        agent_params={**common, "system": "You are supervisor."},
        enable_entrypoint=True,
        can_complete_tasks=True,
        tool_format=tool_format,  # type: ignore[arg-type]
    )
    math = MAILAgentTemplate(
        name="math",
        factory="python::mail.examples.math_dummy.agent:LiteLLMMathFunction",
        comm_targets=["supervisor"],
        actions=math_actions,
        agent_params={**common, "system": "You are math."},
        tool_format=tool_format,  # type: ignore[arg-type]
    )
    return MAILSwarmTemplate(
        name="scripted",
        version="1.3.6",
        agents=[supervisor, math],
        actions=math_actions,
        entrypoint="supervisor",
    )


def _is(agent: str):
    return lambda request: request.system_text.startswith(f"You are {agent}.")


def _tool_results(request: ScriptedRequest) -> list[str]:
    results = []
    for message in request.messages:
        if message.get("role") == "tool":
            results.append(message["content"])
        elif message.get("type") == "function_call_output":
            results.append(message["output"])
    return results


def _last_body(request: ScriptedRequest) -> str:
    match = re.search(r"<body>(.*)</body>", request.last_user_text, re.S)
    assert match, request.last_user_text
    return match.group(1)


@pytest.mark.parametrize("tool_format", ["completions", "responses"])
async def test_full_task_user_supervisor_worker_action_supervisor_complete(
    llm: ScriptedLLM, tool_format: str
):
    llm.queue(
        reasoning("Arithmetic belongs to math."),
        tool_call("send_request", {"target": "math", "subject": "Compute", "body": "2 + 3 * 4"}),
        match=_is("supervisor"),
    )
    llm.queue(
        tool_call("calculate_expression", {"expression": "2 + 3 * 4", "precision": None}),
        match=_is("math"),
    )
    # After ::action_complete::, math answers with the action's real result.
    llm.queue(
        lambda request: reply(
            tool_call(
                "send_response",
                {
                    "target": "supervisor",
                    "subject": "Re: Compute",
                    "body": _tool_results(request)[-1],
                },
            )
        ),
        match=_is("math"),
    )
    llm.queue(
        lambda request: reply(
            text("Math replied."),
            tool_call("task_complete", {"finish_message": f"The answer: {_last_body(request)}"}),
        ),
        match=_is("supervisor"),
    )

    swarm = _template(llm, tool_format).instantiate(
        instance_params={"user_token": "caller"}, user_id="tester", print_llm_streams=False
    )
    runner = asyncio.create_task(swarm.run_continuous())
    try:
        response, events = await asyncio.wait_for(
            swarm.post_message(body="What is 2 + 3 * 4?", subject="Question", show_events=True), 30
        )
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(runner, 10)

    assert response["message"]["subject"] == "::task_complete::"
    assert response["message"]["body"] == "The answer: SUCCESS: 2 + 3 * 4 = 14"
    assert llm.unanswered == [] and llm.pending == 0
    assert len(llm.requests) == 4

    # What the models were sent: the supervisor saw the user's message, math saw the request.
    first = llm.requests[0]
    assert "What is 2 + 3 * 4?" in first.last_user_text and "task_complete" in first.tool_names
    assert "calculate_expression" in llm.requests[1].tool_names
    assert "task_complete" not in llm.requests[1].tool_names
    assert "2 + 3 * 4" in _last_body(llm.requests[1])
    # The supervisor's system prompt was augmented with its comm targets.
    assert "Name: math" in first.system_text

    names = [e.event for e in events]
    assert "action_call" in names and "action_complete" in names and "task_complete_call" in names
    tool_events = [e.data["extra_data"] for e in events if e.event == "tool_call"]
    assert [t["tool_name"] for t in tool_events] == [
        "send_request",
        "calculate_expression",
        "send_response",
        "task_complete",
    ]
    assert tool_events[0]["reasoning"] == "Arithmetic belongs to math."
    assert tool_events[3]["preamble"] == "Math replied."


async def test_provider_failure_becomes_a_task_error_and_the_swarm_survives(llm: ScriptedLLM):
    for _ in range(5):
        llm.queue(error(503, "provider is down"), match=_is("supervisor"))
    swarm = _template(llm, "completions").instantiate(
        instance_params={"user_token": "caller"}, user_id="tester", print_llm_streams=False
    )
    runner = asyncio.create_task(swarm.run_continuous())
    try:
        response, _ = await asyncio.wait_for(swarm.post_message(body="Hello?"), 30)
        assert response["message"]["subject"] == "::agent_error::"
        body = response["message"]["body"]
        assert "supervisor" in body and "after 5 attempts" in body and "HTTP 503" in body

        # The runtime is still alive: the next task completes normally.
        llm.queue(
            tool_call("task_complete", {"finish_message": "back online"}), match=_is("supervisor")
        )
        response, _ = await asyncio.wait_for(swarm.post_message(body="Again?"), 30)
        assert response["message"]["body"] == "back online"
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(runner, 10)
    assert len(llm.requests) == 6
