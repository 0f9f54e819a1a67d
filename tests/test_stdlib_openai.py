"""mail.stdlib.openai agent functions, on the real OpenAI SDK against the scripted LLM."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import mail.stdlib.anthropic
from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.stdlib.openai import (
    OpenAIChatCompletionsAgentFunction,
    OpenAIChatCompletionsSupervisorFunction,
    OpenAIResponsesAgentFunction,
    OpenAIResponsesSupervisorFunction,
)
from support.scripted_llm import ScriptedLLM, reply, text, tool_call

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "lookup_weather",
    "description": "Look up the weather.",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}


@pytest.fixture
async def llm():
    async with ScriptedLLM() as server:
        yield server


def _user(body: str) -> dict[str, Any]:
    return {"role": "user", "content": f"<incoming_message><body>{body}</body></incoming_message>"}


async def test_chat_agent_sends_system_tools_and_parses_calls(llm: ScriptedLLM) -> None:
    agent = OpenAIChatCompletionsAgentFunction(
        name="assistant",
        comm_targets=["supervisor"],
        model="gpt-4o-mini",
        tools=[WEATHER_TOOL],
        system="You are assistant.",
        api_key="k",
        base_url=llm.base_url,
    )
    llm.queue(text("Sure!"), tool_call("lookup_weather", {"location": "Boston"}, "call_1"))
    content, calls = await agent(messages=[_user("Weather in Boston?")])
    assert content == "Sure!"
    assert [(c.tool_name, c.tool_args, c.tool_call_id) for c in calls] == [
        ("lookup_weather", {"location": "Boston"}, "call_1")
    ]
    assert calls[0].completion["tool_calls"][0]["function"]["name"] == "lookup_weather"
    sent = llm.requests[0]
    assert sent.format == "completions" and sent.body["model"] == "gpt-4o-mini"
    # The original sent neither the system prompt nor the MAIL tools.
    assert sent.messages[0] == {"role": "system", "content": "You are assistant."}
    assert sent.messages[1]["role"] == "user"
    assert "send_request" in sent.tool_names and "lookup_weather" in sent.tool_names
    assert sent.tool("lookup_weather")["function"]["parameters"]["required"] == ["location"]
    assert sent.body["tool_choice"] == "required"


async def test_chat_agent_keeps_unparseable_arguments(llm: ScriptedLLM) -> None:
    agent = OpenAIChatCompletionsAgentFunction(
        name="a",
        comm_targets=[],
        model="m",
        tools=[WEATHER_TOOL],
        api_key="k",
        base_url=llm.base_url,
    )
    llm.queue(tool_call("lookup_weather", "{not json"))
    _, calls = await agent([_user("x")])
    assert calls[0].tool_args == {"raw": "{not json"}
    assert llm.requests[0].tool_names == ["lookup_weather"]


async def test_responses_agent_flat_tools_and_multi_turn(llm: ScriptedLLM) -> None:
    agent = OpenAIResponsesAgentFunction(
        name="assistant",
        comm_targets=[],
        model="gpt-4.1",
        tools=[WEATHER_TOOL],
        system="You are assistant.",
        api_key="k",
        base_url=llm.base_url,
    )
    llm.queue(text("Working on it..."), tool_call("lookup_weather", {"location": "Oslo"}, "c9"))
    history = [_user("Weather in Oslo?")]
    content, calls = await agent(history)
    assert content == "Working on it..."
    assert calls[0].tool_name == "lookup_weather" and calls[0].tool_args == {"location": "Oslo"}
    assert calls[0].tool_call_id == "c9" and calls[0].responses
    sent = llm.requests[0]
    assert sent.format == "responses" and sent.body["model"] == "gpt-4.1"
    # The Responses API takes flat tools; the original sent the nested Chat shape.
    assert sent.tool("lookup_weather")["name"] == "lookup_weather"
    assert "function" not in sent.tool("lookup_weather")
    assert sent.system_text == "You are assistant."

    # Second turn: the runtime appends the output items and the tool result.
    history += calls[0].responses
    history.append(calls[0].create_response_msg("SUCCESS: 12 C"))
    llm.queue(tool_call("lookup_weather", {"location": "Bergen"}))
    await agent(history)
    second = llm.requests[1].messages
    outputs = [m for m in second if m.get("type") == "function_call_output"]
    assert outputs == [{"type": "function_call_output", "call_id": "c9", "output": "SUCCESS: 12 C"}]
    assert any(m.get("type") == "function_call" and m.get("call_id") == "c9" for m in second)


@pytest.mark.parametrize(
    ("cls", "fmt"),
    [
        (OpenAIChatCompletionsSupervisorFunction, "completions"),
        (OpenAIResponsesSupervisorFunction, "responses"),
    ],
)
async def test_supervisors_call_with_supervisor_tools(llm: ScriptedLLM, cls, fmt: str) -> None:  # type: ignore[no-untyped-def]
    supervisor = cls(
        name="supervisor",
        comm_targets=["assistant"],
        model="gpt-4o-mini",
        tools=[WEATHER_TOOL],
        enable_entrypoint=True,
        system="You are supervisor.",
        api_key="k",
        base_url=llm.base_url,
    )
    inner_names = {t.get("name") or t["function"]["name"] for t in supervisor.supervisor_fn.tools}
    assert {"lookup_weather", "send_broadcast", "send_interrupt", "task_complete"} <= inner_names
    llm.queue(tool_call("task_complete", {"finish_message": "done"}))
    # The original's Chat Completions supervisor raised KeyError on its first call.
    _, calls = await supervisor([_user("hi")])
    assert calls[0].tool_name == "task_complete"
    sent = llm.requests[0]
    assert sent.format == fmt
    assert {"send_request", "task_complete", "lookup_weather"} <= set(sent.tool_names)
    assert sent.system_text == "You are supervisor."


@pytest.mark.parametrize(
    ("cls", "fmt"),
    [
        (OpenAIChatCompletionsSupervisorFunction, "completions"),
        (OpenAIResponsesSupervisorFunction, "responses"),
    ],
)
async def test_own_tools_replace_builtins_of_the_same_name(llm: ScriptedLLM, cls, fmt: str) -> None:  # type: ignore[no-untyped-def]
    # An own send_request / send_broadcast (as team_tools gives) replaces the built-in one:
    # the API refuses a request that names one tool twice.
    own = [
        {**WEATHER_TOOL, "name": "send_request", "description": "Ask and wait for the reply."},
        {**WEATHER_TOOL, "name": "send_broadcast", "description": "Post to the team thread."},
    ]
    supervisor = cls(
        name="supervisor",
        comm_targets=["assistant"],
        model="gpt-4o-mini",
        tools=own,
        api_key="k",
        base_url=llm.base_url,
    )
    llm.queue(tool_call("task_complete", {"finish_message": "done"}))
    await supervisor([_user("hi")])
    sent = llm.requests[0]
    assert sent.format == fmt
    assert sent.tool_names.count("send_request") == 1
    assert sent.tool_names.count("send_broadcast") == 1
    descriptions = {
        (t.get("function") or t).get("name"): (t.get("function") or t).get("description")
        for t in sent.body["tools"]
    }
    assert descriptions["send_request"] == "Ask and wait for the reply."
    assert descriptions["send_broadcast"] == "Post to the team thread."


async def test_openai_supervisor_runs_a_swarm_task(llm: ScriptedLLM) -> None:
    params = {"model": "gpt-4o-mini", "api_key": "k", "base_url": llm.base_url}
    supervisor = MAILAgentTemplate(
        name="supervisor",
        factory="python::mail.stdlib.openai:OpenAIChatCompletionsSupervisorFunction",
        comm_targets=[],
        actions=[],
        agent_params={**params, "system": "You are supervisor."},
        enable_entrypoint=True,
        can_complete_tasks=True,
        tool_format="completions",
    )
    template = MAILSwarmTemplate(
        name="openai", version="1.0.0", agents=[supervisor], actions=[], entrypoint="supervisor"
    )
    llm.queue(reply(tool_call("task_complete", {"finish_message": "all good"})))
    swarm = template.instantiate(instance_params={"user_token": "t"}, user_id="u")
    runner = asyncio.create_task(swarm.run_continuous())
    try:
        response, _ = await asyncio.wait_for(swarm.post_message(body="Status?"), 30)
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(runner, 10)
    assert response["message"]["body"] == "all good"
    assert "Status?" in llm.requests[0].last_user_text


def test_anthropic_placeholder_is_importable_and_empty() -> None:
    assert mail.stdlib.anthropic.__all__ == []
    assert "empty on purpose" in (mail.stdlib.anthropic.__doc__ or "")
