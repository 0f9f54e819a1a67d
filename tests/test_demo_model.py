"""The offline demo model (`mail/demo`): its decisions, and the route through LiteLLM."""

from __future__ import annotations

import json

import pytest

from mail.core.tools import create_mail_tools, create_supervisor_tools
from mail.factories import LiteLLMActionAgentFunction, LiteLLMSupervisorFunction
from mail.factories.demo_brain import decide
from mail.factories.demo_text import extract_expression, extract_location, fill_arguments

FORECAST_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather_forecast",
        "description": "Get the weather forecast for a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "days_ahead": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "metric": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
            },
            "required": ["location", "days_ahead", "metric"],
        },
    },
}


def xml(
    sender: str, body: str, subject: str = "Question", kind: str = "agent", to: str = "me"
) -> dict:
    return {
        "role": "user",
        "content": (
            "\n<incoming_message>\n<timestamp>2025-01-01T00:00:00+00:00</timestamp>\n"
            f'<from type="{kind}">{sender}</from>\n<to>\n'
            f"['<address type=\"agent\">{to}</address>']\n</to>\n"
            f"<subject>{subject}</subject>\n<body>{body}</body>\n</incoming_message>\n"
        ),
    }


def supervisor_tools() -> list[dict]:
    targets = ["weather", "math"]
    return create_mail_tools(targets, style="completions") + create_supervisor_tools(
        targets, style="completions"
    )


def assistant(*calls: tuple[str, dict]) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)
        ],
    }


def test_text_extraction_helpers():
    assert extract_location("What's the weather in New York tomorrow?") == "New York"
    assert extract_location("forecast for Paris.") == "Paris"
    assert extract_expression("What is 12 * (3 + 4)?") == "12 * (3 + 4)"
    assert extract_expression("compute 6 times 7") == "6 * 7"
    assert extract_expression("no maths here") is None
    args = fill_arguments(
        FORECAST_TOOL["function"]["parameters"], "Weather in Oslo in 3 days, in fahrenheit"
    )
    assert args == {"location": "Oslo", "days_ahead": 3, "metric": False}


def test_supervisor_delegates_to_the_fitting_target_then_completes():
    system = {"role": "system", "content": "You are supervisor."}
    user = xml("alice", "What's the weather in Rome?", kind="user", to="supervisor")
    turn = decide([system, user], supervisor_tools(), "required")
    assert turn.calls == [
        (
            "send_request",
            {"target": "weather", "subject": "Question", "body": "What's the weather in Rome?"},
        )
    ]
    reply = xml("weather", "Sunny in Rome.", subject="Re: Question")
    history = [system, user, assistant(*turn.calls), reply]
    assert decide(history, supervisor_tools(), "required").calls == [
        ("task_complete", {"finish_message": "Sunny in Rome."})
    ]


def test_supervisor_waits_for_every_delegate_before_completing():
    user = xml("alice", "Weather in Oslo and compute 2 + 2", kind="user")
    first = decide([user], supervisor_tools(), "required")
    assert [args["target"] for _, args in first.calls] == ["math", "weather"] or [
        args["target"] for _, args in first.calls
    ] == ["weather", "math"]
    history = [user, assistant(*first.calls), xml("math", "2 + 2 = 4")]
    waiting = decide(history, supervisor_tools(), "required")
    assert waiting.calls[0][0] == "await_message"
    history += [assistant(*waiting.calls), xml("weather", "Cold in Oslo.")]
    done = decide(history, supervisor_tools(), "required")
    assert done.calls[0][0] == "task_complete"
    assert "2 + 2 = 4" in done.calls[0][1]["finish_message"]
    assert "Cold in Oslo." in done.calls[0][1]["finish_message"]


def test_supervisor_without_a_fitting_target_answers_itself():
    turn = decide([xml("alice", "Tell me a joke", kind="user")], supervisor_tools(), "required")
    assert turn.calls[0][0] == "task_complete"
    assert "[demo model]" in turn.calls[0][1]["finish_message"]


def test_worker_calls_its_action_then_answers_the_asker():
    tools = create_mail_tools(["supervisor"], style="completions") + [FORECAST_TOOL]
    request = xml("supervisor", "Forecast for Lisbon tomorrow please", subject="Weather?")
    turn = decide([request], tools, "required")
    assert turn.calls == [
        ("get_weather_forecast", {"location": "Lisbon", "days_ahead": 1, "metric": True})
    ]
    history = [
        request,
        assistant(*turn.calls),
        {"role": "tool", "tool_call_id": "c0", "content": "SUCCESS: Lisbon: sunny"},
        xml(
            "system", "Action completed successfully", subject="::action_complete::", kind="system"
        ),
    ]
    reply = decide(history, tools, "required")
    assert reply.calls == [
        (
            "send_response",
            {"target": "supervisor", "subject": "Re: Weather?", "body": "Lisbon: sunny"},
        )
    ]


def test_manual_step_prompts_get_text_or_one_action_call_per_buffered_guess():
    record = {
        "type": "function",
        "function": {
            "name": "record_guess",
            "description": "Record a guess",
            "parameters": {
                "type": "object",
                "properties": {"player_name": {"type": "string"}, "guess": {"type": "integer"}},
                "required": ["player_name", "guess"],
            },
        },
    }
    prompt = (
        "<private_message>\n<from>Alice</from>\nI guess 4.\n</private_message>\n\n\n"
        "<private_message>\n<from>Bob</from>\nI guess 9.\n</private_message>\n\n\n"
        "Use the record_guess tool once for each private guess above."
    )
    turn = decide([{"role": "user", "content": prompt}], [record], "auto")
    assert turn.calls == [
        ("record_guess", {"player_name": "Alice", "guess": 4}),
        ("record_guess", {"player_name": "Bob", "guess": 9}),
    ]
    guess = decide(
        [
            {"role": "system", "content": "You are Alice."},
            {"role": "user", "content": "Guess between 1 and 20. Reply with: I guess <number>."},
        ],
        [],
        "auto",
    )
    assert guess.calls == [] and guess.text.startswith("I guess ")
    assert 1 <= int(guess.text.split()[-1].rstrip(".")) <= 20


@pytest.mark.parametrize("tool_format", ["completions", "responses"])
@pytest.mark.parametrize("stream", [False, True])
async def test_demo_model_runs_through_the_litellm_agent_functions(tool_format: str, stream: bool):
    sup = LiteLLMSupervisorFunction(
        name="supervisor",
        comm_targets=["weather", "math"],
        tools=[],
        llm="mail/demo",
        use_proxy=False,
        tool_format=tool_format,
        stream_tokens=stream,
        print_llm_streams=False,
    )
    _, calls = await sup([xml("alice", "What is 6 * 7?", kind="user")], "required")
    assert [(c.tool_name, c.tool_args["target"]) for c in calls] == [("send_request", "math")]
    assert calls[0].completion or calls[0].responses

    worker = LiteLLMActionAgentFunction(
        name="weather",
        comm_targets=["supervisor"],
        tools=[FORECAST_TOOL]
        if tool_format == "completions"
        else [{"type": "function", **FORECAST_TOOL["function"]}],
        llm="mail/demo",
        use_proxy=False,
        tool_format=tool_format,
        stream_tokens=stream,
        print_llm_streams=False,
    )
    _, calls = await worker([xml("supervisor", "Weather in Madrid?")], "required")
    assert calls[0].tool_name == "get_weather_forecast"
    assert calls[0].tool_args["location"] == "Madrid"


async def test_unknown_offline_model_name_is_a_clear_error():
    from mail.factories import LiteLLMAgentFunction, LLMConfigError

    fn = LiteLLMAgentFunction(
        name="a",
        comm_targets=[],
        tools=[],
        llm="mail/gpt",
        use_proxy=False,
        tool_format="completions",
    )
    # A configuration mistake: reported at once, never retried.
    with pytest.raises(LLMConfigError, match="the only one is 'mail/demo'"):
        await fn([{"role": "user", "content": "hi"}])
