"""Constructing agent functions: parameters, tool sets and the factory calling convention."""

from __future__ import annotations

import warnings

import pytest
from pydantic import BaseModel, Field

from mail import MAILAgentTemplate
from mail.factories import (
    ActionAgentFunction,
    LiteLLMActionAgentFunction,
    LiteLLMAgentFunction,
    LiteLLMSupervisorFunction,
    MAILAgentFunction,
    SupervisorFunction,
    action_agent_factory,
    base_agent_factory,
    supervisor_factory,
)
from mail.factories.base import normalize_tools


class LookupArgs(BaseModel):
    """Look something up"""

    query: str = Field(description="What to look up")


def _names(tools: list[dict]) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in tools]


@pytest.mark.parametrize(
    "factory", [LiteLLMAgentFunction, LiteLLMActionAgentFunction, LiteLLMSupervisorFunction]
)
def test_unknown_parameters_fail_loudly_naming_the_parameter(factory):
    with pytest.raises(TypeError, match="reasoning_efort"):
        factory(name="a", comm_targets=[], tools=[], llm="openai/gpt-5-mini", reasoning_efort="low")


def test_wrapper_suggests_the_intended_parameter():
    with pytest.raises(TypeError, match="did you mean 'stream_tokens'"):
        LiteLLMSupervisorFunction(
            name="a", comm_targets=[], tools=[], llm="openai/gpt-5-mini", stream_token=True
        )


def test_invalid_llm_and_tool_format_are_rejected():
    with pytest.raises(ValueError, match="'llm' must be a LiteLLM model name"):
        LiteLLMAgentFunction(name="a", comm_targets=[], tools=[], llm="")
    with pytest.raises(ValueError, match="tool_format"):
        LiteLLMAgentFunction(name="a", comm_targets=[], tools=[], llm="x/y", tool_format="xml")


def test_action_agent_with_zero_actions_is_allowed():
    # Fix: the reference implementation raised IndexError here.
    fn = LiteLLMActionAgentFunction(
        name="helper", comm_targets=["supervisor"], tools=[], llm="openai/gpt-5-mini"
    )
    assert isinstance(fn, ActionAgentFunction) and isinstance(fn, MAILAgentFunction)
    assert fn.tools == []
    assert _names(fn.action_agent_fn.build_tools()) == [
        "send_request",
        "send_response",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
        "help",
    ]


def test_supervisor_tool_order_and_solo_supervisor():
    sup = LiteLLMSupervisorFunction(
        name="sup",
        comm_targets=["worker"],
        tools=[LookupArgs],
        llm="openai/gpt-5-mini",
        tool_format="completions",
        exclude_tools=["help"],
    )
    assert isinstance(sup, SupervisorFunction)
    assert _names(sup.supervisor_fn.build_tools()) == [
        "send_request",
        "send_response",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
        "LookupArgs",
        "send_interrupt",
        "send_broadcast",
        "task_complete",
    ]
    # Pydantic classes become strict tool dicts in the agent's tool format.
    lookup = sup.tools[0]
    assert lookup["function"]["strict"] is True
    assert lookup["function"]["parameters"]["required"] == ["query"]

    solo = LiteLLMSupervisorFunction(
        name="solo", comm_targets=[], tools=[], llm="openai/gpt-5-mini"
    )
    assert _names(solo.supervisor_fn.build_tools()) == ["task_complete"]


def test_thinking_settings_follow_reasoning_effort():
    fn = LiteLLMAgentFunction(
        name="a", comm_targets=[], tools=[], llm="anthropic/claude-x", reasoning_effort="medium"
    )
    assert fn.thinking == {"type": "enabled", "budget_tokens": 8000}
    assert fn.max_tokens == 12000
    explicit = LiteLLMAgentFunction(
        name="a", comm_targets=[], tools=[], llm="x/y", thinking_budget=1000, max_tokens=5000
    )
    assert explicit.thinking_budget == 1000 and explicit.max_tokens == 5000
    plain = LiteLLMAgentFunction(name="a", comm_targets=[], tools=[], llm="x/y")
    assert plain.thinking == {"type": "disabled"} and plain.max_tokens is None


def test_build_messages_never_mutates_history():
    fn = LiteLLMAgentFunction(name="a", comm_targets=[], tools=[], llm="x/y", system="SYS")
    history = [{"role": "user", "content": "hi"}]
    built = fn.build_messages(history)
    assert built == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "hi"}]
    assert history == [{"role": "user", "content": "hi"}]
    already = [{"role": "system", "content": "OTHER"}, {"role": "user", "content": "hi"}]
    assert fn.build_messages(already) == already


def test_normalize_tools_rejects_other_objects():
    with pytest.raises(TypeError, match="tool dicts or pydantic model classes"):
        normalize_tools(["not a tool"], "responses")


@pytest.mark.parametrize(
    ("factory", "inner_cls"),
    [
        (base_agent_factory, LiteLLMAgentFunction),
        (action_agent_factory, LiteLLMActionAgentFunction),
        (supervisor_factory, LiteLLMSupervisorFunction),
    ],
)
def test_deprecated_function_factories_expose_the_agent(factory, inner_cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = factory(name="a", comm_targets=["b"], tools=[], llm="openai/gpt-5-mini")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert callable(run)
    assert isinstance(run._mail_agent, inner_cls)


def test_template_calling_convention_passes_instance_params_and_wiring():
    template = MAILAgentTemplate(
        name="sup",
        factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
        comm_targets=["math"],
        actions=[],
        agent_params={"llm": "openai/gpt-5-mini", "system": "S", "use_proxy": True},
        enable_entrypoint=True,
        can_complete_tasks=True,
        tool_format="completions",
    )
    agent = template.instantiate({"user_token": "caller-key"})
    fn = agent.function
    assert isinstance(fn, LiteLLMSupervisorFunction)
    assert fn.supervisor_fn.user_token == "caller-key"
    assert fn.tool_format == "completions" and fn.comm_targets == ["math"]
    assert fn.enable_entrypoint is True and fn.can_complete_tasks is True

    bad = MAILAgentTemplate(
        name="sup",
        factory=LiteLLMSupervisorFunction,
        comm_targets=[],
        actions=[],
        agent_params={"llm": "openai/gpt-5-mini", "temprature": 0.2},
        enable_entrypoint=True,
        can_complete_tasks=True,
    )
    with pytest.raises(TypeError, match="temprature"):
        bad.instantiate({})


def test_a_proxy_without_a_url_is_refused_when_the_swarm_is_built(monkeypatch):
    from mail import MAILSwarmTemplate

    monkeypatch.delenv("LITELLM_PROXY_API_BASE", raising=False)

    def swarm(**params):
        agent = MAILAgentTemplate(
            name="sup",
            factory=LiteLLMSupervisorFunction,
            comm_targets=[],
            agent_params={"llm": "openai/gpt-5-mini", **params},
            enable_entrypoint=True,
            can_complete_tasks=True,
        )
        return MAILSwarmTemplate(
            name="s", version="1", agents=[agent], actions=[], entrypoint="sup"
        )

    # use_proxy is true unless said otherwise: the swarm is refused at once, not at the
    # first message.
    with pytest.raises(ValueError, match="agent 'sup' has use_proxy=true .*LITELLM_PROXY_API_BASE"):
        swarm()
    with pytest.raises(ValueError, match="use_proxy"):
        swarm(use_proxy=True)
    swarm(use_proxy=False)
    swarm(api_base="http://127.0.0.1:9/v1")
    monkeypatch.setenv("LITELLM_PROXY_API_BASE", "http://127.0.0.1:4000")
    swarm()
