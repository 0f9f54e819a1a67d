"""LiteLLM agent functions on the OpenAI Responses path, against the scripted provider."""

from __future__ import annotations

import copy
import uuid

import pytest

from mail.factories import LiteLLMAgentFunction, LiteLLMSupervisorFunction, RetryPolicy
from support.scripted_llm import ScriptedLLM, reasoning, reply, text, tool_call, web_search

HISTORY = [{"role": "user", "content": "What is 2 + 2 in Paris weather?"}]

FORECAST_TOOL = {
    "type": "function",
    "name": "get_weather_forecast",
    "description": "Get the weather forecast for a given location",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LiteLLMAgentFunction, "retry_policy", RetryPolicy(base_delay=0.01))


@pytest.fixture
async def llm():
    async with ScriptedLLM() as server:
        yield server


def _supervisor(llm: ScriptedLLM, **overrides) -> LiteLLMSupervisorFunction:
    params = dict(
        name="supervisor",
        comm_targets=["weather", "math"],
        tools=[FORECAST_TOOL],
        llm="openai/gpt-5-mini",
        system="You are supervisor.",
        tool_format="responses",
        reasoning_effort="low",
        use_proxy=False,
        api_base=llm.base_url,
        api_key="test-key",
        print_llm_streams=False,
    )
    params.update(overrides)
    return LiteLLMSupervisorFunction(**params)


@pytest.mark.parametrize("stream", [False, True])
async def test_request_uses_responses_endpoint_with_system_history_and_tools(
    llm: ScriptedLLM, stream: bool
):
    fn = _supervisor(llm, stream_tokens=stream)
    history = copy.deepcopy(HISTORY)
    llm.queue(tool_call("task_complete", {"finish_message": "4"}))

    await fn(history, "required")

    request = llm.requests[0]
    assert request.path == "/v1/responses"
    assert request.stream is stream
    sent = request.body["input"]
    assert sent[0]["role"] == "system" and "You are supervisor." in str(sent[0]["content"])
    assert "What is 2 + 2" in str(sent[1]["content"])
    assert request.tool_names == [
        "send_request",
        "send_response",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
        "help",
        "get_weather_forecast",
        "send_interrupt",
        "send_broadcast",
        "task_complete",
    ]
    # Responses layout: name at the top level, not under "function".
    target = request.tool("send_request")["parameters"]["properties"]["target"]
    assert target["enum"] == ["weather", "math"]
    assert request.tool("get_weather_forecast") == FORECAST_TOOL
    assert request.body["tool_choice"] == "required"
    assert request.body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert "reasoning.encrypted_content" in request.body["include"]
    assert history == HISTORY


@pytest.mark.parametrize("stream", [False, True])
async def test_interleaved_reasoning_and_preamble_attach_to_the_following_call(
    llm: ScriptedLLM, stream: bool
):
    fn = _supervisor(llm, stream_tokens=stream)
    llm.queue(
        reasoning("The user wants a forecast."),
        tool_call("get_weather_forecast", {"location": "Paris"}, call_id="call_a"),
        reasoning("Math is needed too."),
        text("Asking math."),
        tool_call(
            "send_request", {"target": "math", "subject": "sum", "body": "2+2"}, call_id="call_b"
        ),
        tool_call(
            "send_request", {"target": "weather", "subject": "w", "body": "Paris"}, call_id="call_c"
        ),
    )

    content, calls = await fn(copy.deepcopy(HISTORY), "required")

    assert [c.tool_call_id for c in calls] == ["call_a", "call_b", "call_c"]
    assert [c.tool_name for c in calls] == ["get_weather_forecast", "send_request", "send_request"]
    assert calls[0].tool_args == {"location": "Paris"}
    assert calls[0].reasoning == ["The user wants a forecast."] and calls[0].preamble is None
    assert calls[1].reasoning == ["Math is needed too."] and calls[1].preamble == "Asking math."
    assert calls[2].reasoning is None and calls[2].preamble is None
    assert content == "Asking math."
    # Every call carries the whole output list, reasoning items included (even when streamed,
    # where the provider's final response omits them).
    output = calls[0].responses
    assert all(c.responses == output for c in calls)
    assert [item["type"] for item in output] == [
        "reasoning",
        "function_call",
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert output[0]["summary"][0]["text"] == "The user wants a forecast."
    assert calls[1].create_response_msg("SUCCESS") == {
        "type": "function_call_output",
        "call_id": "call_b",
        "output": "SUCCESS",
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_text_only_answer_becomes_text_output_with_uuid(llm: ScriptedLLM, stream: bool):
    fn = _supervisor(llm, stream_tokens=stream)
    llm.queue(reasoning("Simple."), text("Four."))

    content, calls = await fn(copy.deepcopy(HISTORY), "auto")

    assert content == "Four."
    assert len(calls) == 1
    assert calls[0].tool_name == "text_output"
    assert calls[0].tool_args == {"content": "Four."}
    assert uuid.UUID(calls[0].tool_call_id)
    assert calls[0].reasoning == ["Simple."]
    assert calls[0].responses and calls[0].completion == {}


async def test_history_replay_and_forced_tool_choice(llm: ScriptedLLM):
    fn = _supervisor(llm)
    history = copy.deepcopy(HISTORY)
    llm.queue(tool_call("get_weather_forecast", {"location": "Oslo"}, call_id="call_w"))
    _, calls = await fn(history, "required")
    history.extend(calls[0].responses)
    history.append(calls[0].create_response_msg("SUCCESS: sunny"))
    llm.queue(tool_call("task_complete", {"finish_message": "sunny"}))

    await fn(history, {"type": "function", "name": "task_complete"})

    sent = llm.requests[1].body["input"]
    assert sent[2]["type"] == "function_call" and sent[2]["call_id"] == "call_w"
    assert sent[3] == {
        "type": "function_call_output",
        "call_id": "call_w",
        "output": "SUCCESS: sunny",
    }
    assert llm.requests[1].body["tool_choice"] == {"type": "function", "name": "task_complete"}


async def test_builtin_web_search_call_is_reported(llm: ScriptedLLM):
    fn = _supervisor(llm)
    llm.queue(
        web_search("paris weather", call_id="ws_1"),
        tool_call("task_complete", {"finish_message": "x"}),
    )
    _, calls = await fn(copy.deepcopy(HISTORY), "required")
    assert calls[0].tool_name == "web_search_call"
    assert calls[0].tool_call_id == "ws_1"
    assert calls[0].tool_args == {
        "query": "paris weather",
        "search_type": "search",
        "status": "completed",
    }
    assert calls[1].tool_name == "task_complete"


async def test_empty_output_returns_no_calls(llm: ScriptedLLM):
    fn = _supervisor(llm)
    llm.queue(reply())
    content, calls = await fn(copy.deepcopy(HISTORY), "required")
    assert content is None and calls == []


async def test_streamed_tokens_are_printed_only_when_enabled(
    llm: ScriptedLLM, capsys: pytest.CaptureFixture[str]
):
    loud = _supervisor(llm, stream_tokens=True, print_llm_streams=True)
    llm.queue(reasoning("thinking hard"), text("Four."))
    await loud(copy.deepcopy(HISTORY), "auto")
    printed = capsys.readouterr().out
    assert "thinking hard" in printed and "Four." in printed and "[supervisor]" in printed

    # The runtime switches printing off by setting the attribute on the inner function.
    loud.supervisor_fn.print_llm_streams = False
    llm.queue(reasoning("quiet thoughts"), text("Five."))
    await loud(copy.deepcopy(HISTORY), "auto")
    assert "quiet thoughts" not in capsys.readouterr().out
