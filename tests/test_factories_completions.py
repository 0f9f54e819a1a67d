"""LiteLLM agent functions on the Chat Completions path, against the scripted provider."""

from __future__ import annotations

import copy
import json
import uuid

import pytest

from mail.factories import (
    LiteLLMActionAgentFunction,
    LiteLLMAgentFunction,
    LiteLLMSupervisorFunction,
    LLMConfigError,
    RetryPolicy,
)
from support.scripted_llm import ScriptedLLM, reasoning, text, tool_call

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add_numbers",
        "description": "Add two numbers",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}

HISTORY = [
    {
        "role": "user",
        "content": "<incoming_message>\n<body>add 2 and 3</body>\n</incoming_message>",
    },
]


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LiteLLMAgentFunction, "retry_policy", RetryPolicy(base_delay=0.01))


@pytest.fixture
async def llm():
    async with ScriptedLLM() as server:
        yield server


def _worker(llm: ScriptedLLM, **overrides) -> LiteLLMActionAgentFunction:
    params = dict(
        name="worker",
        comm_targets=["supervisor"],
        tools=[ADD_TOOL],
        llm="openai/gpt-4o-mini",
        system="You are worker.",
        tool_format="completions",
        use_proxy=False,
        api_base=llm.base_url,
        api_key="test-key",
        print_llm_streams=False,
    )
    params.update(overrides)
    return LiteLLMActionAgentFunction(**params)


@pytest.mark.parametrize("stream", [False, True])
async def test_request_carries_system_prompt_history_and_tools(llm: ScriptedLLM, stream: bool):
    fn = _worker(llm, stream_tokens=stream)
    history = copy.deepcopy(HISTORY)
    llm.queue(tool_call("add_numbers", {"a": 2, "b": 3}))

    await fn(history, "required")

    request = llm.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.stream is stream
    assert request.body["messages"][0] == {"role": "system", "content": "You are worker."}
    assert request.body["messages"][1]["content"] == HISTORY[0]["content"]
    # MAIL tools first (this agent talks to the supervisor), then its action.
    assert request.tool_names == [
        "send_request",
        "send_response",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
        "help",
        "add_numbers",
    ]
    assert request.tool("send_request")["function"]["parameters"]["properties"]["target"][
        "enum"
    ] == ["supervisor"]
    assert (
        request.tool("add_numbers")["function"]["parameters"] == ADD_TOOL["function"]["parameters"]
    )
    assert request.body["tool_choice"] == "required"
    # The runtime's history list is left alone: the system prompt is only in the request.
    assert history == HISTORY


@pytest.mark.parametrize("stream", [False, True])
async def test_parallel_calls_parse_in_order_with_reasoning_and_preamble(
    llm: ScriptedLLM, stream: bool
):
    fn = _worker(llm, stream_tokens=stream)
    llm.queue(
        reasoning("Two sums are needed."),
        text("Adding both pairs."),
        tool_call("add_numbers", {"a": 2, "b": 3}, call_id="call_one"),
        tool_call("add_numbers", {"a": 4, "b": 5}, call_id="call_two"),
        tool_call("send_response", {"target": "supervisor", "subject": "s", "body": "b"}),
    )

    content, calls = await fn(copy.deepcopy(HISTORY), "required")

    assert content == "Adding both pairs."
    assert [c.tool_name for c in calls] == ["add_numbers", "add_numbers", "send_response"]
    assert [c.tool_call_id for c in calls[:2]] == ["call_one", "call_two"]
    assert [c.tool_args for c in calls[:2]] == [{"a": 2, "b": 3}, {"a": 4, "b": 5}]
    assert calls[0].reasoning == ["Two sums are needed."]
    assert calls[0].preamble == "Adding both pairs."
    # Parallel calls: only the first carries the reasoning (the runtime adds reasoning_ref).
    assert calls[1].reasoning is None and calls[1].preamble is None
    completion = calls[0].completion
    assert completion["role"] == "assistant"
    assert [tc["id"] for tc in completion["tool_calls"]][:2] == ["call_one", "call_two"]
    assert json.loads(completion["tool_calls"][1]["function"]["arguments"]) == {"a": 4, "b": 5}
    assert all(c.completion == completion for c in calls)
    assert calls[0].create_response_msg("SUCCESS")["tool_call_id"] == "call_one"


@pytest.mark.parametrize("stream", [False, True])
async def test_text_only_answer_becomes_text_output(llm: ScriptedLLM, stream: bool):
    fn = _worker(llm, stream_tokens=stream)
    llm.queue(text("The answer is 5."))

    content, calls = await fn(copy.deepcopy(HISTORY), "auto")

    assert content == "The answer is 5."
    assert len(calls) == 1
    call = calls[0]
    assert call.tool_name == "text_output"
    assert call.tool_args == {"content": "The answer is 5."}
    assert uuid.UUID(call.tool_call_id)
    assert call.completion == {"role": "assistant", "content": "The answer is 5."}
    assert llm.requests[0].body["tool_choice"] == "auto"


async def test_tool_choice_shapes_and_default_override(llm: ScriptedLLM):
    fn = _worker(llm)
    llm.queue(tool_call("task_complete", {"finish_message": "done"}))
    await fn(copy.deepcopy(HISTORY), {"type": "function", "name": "task_complete"})
    # The runtime's Responses-style forced choice is converted for Chat Completions.
    assert llm.requests[0].body["tool_choice"] == {
        "type": "function",
        "function": {"name": "task_complete"},
    }

    forced = _worker(llm, default_tool_choice="auto")
    llm.queue(text("ok"))
    await forced(copy.deepcopy(HISTORY), "required")
    assert llm.requests[1].body["tool_choice"] == "auto"


async def test_agent_without_targets_or_tools_sends_no_tools(llm: ScriptedLLM):
    fn = LiteLLMAgentFunction(
        name="solo",
        comm_targets=[],
        tools=[],
        llm="openai/gpt-4o-mini",
        tool_format="completions",
        use_proxy=False,
        api_base=llm.base_url,
        api_key="k",
        print_llm_streams=False,
    )
    llm.queue(text("hello"))
    await fn([{"role": "user", "content": "hi"}], "required")
    body = llm.requests[0].body
    assert "tools" not in body and "tool_choice" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_supervisor_proxy_call_sends_the_user_token(llm: ScriptedLLM):
    # Fix: the reference supervisor dropped user_token for its inner call ("Bearer ").
    sup = LiteLLMSupervisorFunction(
        name="supervisor",
        comm_targets=["worker"],
        tools=[],
        llm="openai/gpt-4o-mini",
        tool_format="completions",
        user_token="user-key-123",
        use_proxy=True,
        api_base=llm.base_url,
        print_llm_streams=False,
    )
    llm.queue(tool_call("task_complete", {"finish_message": "ok"}))
    await sup(copy.deepcopy(HISTORY), "required")
    request = llm.requests[0]
    assert request.headers["Authorization"] == "Bearer user-key-123"
    assert sup.supervisor_fn.user_token == "user-key-123"
    assert request.tool_names[-3:] == ["send_interrupt", "send_broadcast", "task_complete"]


async def test_proxy_without_base_url_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("LITELLM_PROXY_API_BASE", raising=False)
    fn = LiteLLMAgentFunction(
        name="a", comm_targets=[], tools=[], llm="openai/gpt-4o-mini", use_proxy=True
    )
    with pytest.raises(LLMConfigError, match="LITELLM_PROXY_API_BASE"):
        await fn([{"role": "user", "content": "x"}])


# ------------------------------------------------------------------------------------------
# Claude models (Anthropic provider, always streamed)


def _claude(llm: ScriptedLLM, **overrides) -> LiteLLMSupervisorFunction:
    params = dict(
        name="supervisor",
        comm_targets=["worker"],
        tools=[ADD_TOOL],
        llm="anthropic/claude-sonnet-4-5",
        system="You are supervisor.",
        tool_format="completions",
        use_proxy=False,
        api_base=llm.root_url,
        api_key="test-key",
        print_llm_streams=False,
    )
    params.update(overrides)
    return LiteLLMSupervisorFunction(**params)


async def test_claude_interleaved_thinking_attributes_reasoning_per_call(llm: ScriptedLLM):
    fn = _claude(llm, reasoning_effort="low")
    llm.queue(
        reasoning("First I add."),
        text("Adding now."),
        tool_call("add_numbers", {"a": 1, "b": 2}, call_id="toolu_1"),
        reasoning("Now I can delegate."),
        tool_call(
            "send_request", {"target": "worker", "subject": "s", "body": "b"}, call_id="toolu_2"
        ),
        tool_call("task_complete", {"finish_message": "done"}, call_id="toolu_3"),
    )

    content, calls = await fn(copy.deepcopy(HISTORY), "required")

    request = llm.requests[0]
    assert request.path == "/v1/messages"
    assert request.stream is True
    assert request.system_text == "You are supervisor."
    assert request.body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert request.body["max_tokens"] == 8000
    assert "interleaved-thinking-2025-05-14" in request.headers.get("anthropic-beta", "")
    # Anthropic refuses forced tool use while thinking.
    assert request.body["tool_choice"] == {"type": "auto"}
    assert "add_numbers" in request.tool_names and "task_complete" in request.tool_names

    assert [c.tool_name for c in calls] == ["add_numbers", "send_request", "task_complete"]
    assert [c.tool_call_id for c in calls] == ["toolu_1", "toolu_2", "toolu_3"]
    assert calls[0].reasoning == ["First I add."] and calls[0].preamble == "Adding now."
    assert calls[1].reasoning == ["Now I can delegate."] and calls[1].preamble is None
    assert calls[2].reasoning is None
    blocks = calls[0].completion["thinking_blocks"]
    assert [b["thinking"] for b in blocks] == ["First I add.", "Now I can delegate."]
    assert all(b["signature"] == "scripted-signature" for b in blocks)
    assert content == "Adding now."


async def test_claude_history_round_trip_and_text_only(llm: ScriptedLLM):
    fn = _claude(llm)
    llm.queue(tool_call("add_numbers", {"a": 1, "b": 2}, call_id="toolu_9"))
    history = copy.deepcopy(HISTORY)
    _, calls = await fn(history, "required")
    # What the runtime does after the turn: the assistant message, then the tool result.
    history.append(calls[0].completion)
    history.append(calls[0].create_response_msg("SUCCESS: 3"))
    llm.queue(reasoning("All done."), text("1 + 2 = 3"))

    content, calls = await fn(history, "required")

    sent = llm.requests[1].body["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["content"][0]["type"] == "tool_use" and sent[1]["content"][0]["id"] == "toolu_9"
    assert sent[2]["role"] == "user" and sent[2]["content"][0]["type"] == "tool_result"
    assert sent[2]["content"][0]["tool_use_id"] == "toolu_9"
    assert llm.requests[1].body["tool_choice"] == {"type": "any"}
    assert content == "1 + 2 = 3"
    assert calls[0].tool_name == "text_output" and calls[0].tool_args == {"content": "1 + 2 = 3"}
    assert calls[0].reasoning == ["All done."] and calls[0].preamble is None


async def test_claude_with_proxy_goes_through_the_proxy(llm: ScriptedLLM):
    # Fix: the reference Anthropic path ignored use_proxy.
    fn = _claude(llm, use_proxy=True, user_token="tok-claude", api_base=llm.base_url)
    llm.queue(tool_call("task_complete", {"finish_message": "ok"}))
    _, calls = await fn(copy.deepcopy(HISTORY), "required")
    request = llm.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer tok-claude"
    assert request.body["model"] == "anthropic/claude-sonnet-4-5"
    assert calls[0].tool_name == "task_complete"


async def test_model_settings_of_a_hand_built_agent_reach_the_request(llm: ScriptedLLM):
    from mail import MAILAgentTemplate, MAILSwarmTemplate

    settings = {"temperature": 0.2, "top_p": 0.9, "seed": 7, "stop": ["</done>"]}
    supervisor = MAILAgentTemplate(
        name="supervisor",
        factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
        comm_targets=[],
        agent_params={
            "llm": "openai/gpt-4o-mini",
            "use_proxy": False,
            "api_base": llm.base_url,
            "api_key": "k",
            "presence_penalty": 0.5,
            "frequency_penalty": 0.1,
            **settings,
        },
        enable_entrypoint=True,
        can_complete_tasks=True,
    )
    template = MAILSwarmTemplate(
        name="settings", version="1", agents=[supervisor], actions=[], entrypoint="supervisor"
    )
    swarm = template.instantiate({"user_token": "t"}, user_id="u", print_llm_streams=False)
    llm.queue(tool_call("task_complete", {"finish_message": "ok"}))
    try:
        response, _ = await swarm.post_message(body="hi", timeout=60)
    finally:
        await swarm.shutdown()
    assert response["message"]["body"] == "ok"
    body = llm.requests[0].body
    assert {key: body[key] for key in settings} == settings
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, 0.1)

    # The Responses API takes temperature and top_p only: the others are refused, not dropped.
    with pytest.raises(LLMConfigError, match="seed cannot be sent to the Responses API"):
        LiteLLMAgentFunction(
            name="a",
            comm_targets=[],
            tools=[],
            llm="openai/gpt-5-mini",
            seed=1,
            tool_format="responses",
        )
