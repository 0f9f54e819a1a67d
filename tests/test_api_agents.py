"""MAILAgentTemplate.instantiate: the factory calling convention (BEHAVIOR §3.3), MAILAgent."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

from mail import MAILAction, MAILAgent, MAILAgentTemplate
from mail.core.agents import AgentCore
from support.scripted_agents import (
    ScriptedAgent,
    complete_immediately_factory,
    echo_action,
    scripted_factory,
)

LOOKUP = MAILAction(
    "lookup",
    "Look something up",
    {
        "type": "object",
        "properties": {"q": {"type": "string", "enum": ["a", "b"]}},
        "required": ["q"],
    },
    echo_action,
)


def recorded(agent: MAILAgent) -> dict[str, Any]:
    return agent.function.factory_kwargs  # type: ignore[attr-defined,no-any-return]


def test_instantiate_passes_exactly_the_layered_kwargs() -> None:
    template = MAILAgentTemplate(
        name="alpha",
        factory=complete_immediately_factory,
        comm_targets=["beta", "gamma@remote"],
        actions=[LOOKUP],
        agent_params={"llm": "openai/gpt-x", "name": "alpha-renamed", "exclude_tools": ["x"]},
        enable_entrypoint=True,
        enable_interswarm=True,
        can_complete_tasks=True,
        tool_format="completions",
        exclude_tools=["send_interrupt", "await_message"],
    )
    agent = template.instantiate(
        {"user_token": "secret-key", "llm": "openai/override"},
        additional_exclude_tools=["help", "await_message"],
    )
    assert recorded(agent) == {
        "name": "alpha-renamed",  # agent_params override the top layer
        "comm_targets": ["beta", "gamma@remote"],
        "tools": [LOOKUP.to_tool_dict(style="completions")],
        "enable_entrypoint": True,
        "enable_interswarm": True,
        "tool_format": "completions",
        "can_complete_tasks": True,
        "exclude_tools": ["await_message", "help", "send_interrupt"],  # forced sorted union
        "llm": "openai/override",  # instance_params override agent_params
        "user_token": "secret-key",
    }
    assert recorded(agent)["tools"][0]["function"]["parameters"]["properties"]["q"]["enum"] == [
        "a",
        "b",
    ]
    # The MAILAgent keeps the template's identity and wiring.
    assert agent.name == "alpha" and agent.exclude_tools == [
        "await_message",
        "help",
        "send_interrupt",
    ]
    assert agent.actions == [LOOKUP] and agent.tool_format == "completions"


def test_instantiate_defaults_and_responses_tools() -> None:
    template = MAILAgentTemplate("solo", complete_immediately_factory, [], actions=[LOOKUP])
    kwargs = recorded(template.instantiate())
    assert kwargs == {
        "name": "solo",
        "comm_targets": [],
        "tools": [LOOKUP.to_tool_dict(style="responses")],
        "enable_entrypoint": False,
        "enable_interswarm": False,
        "tool_format": "responses",
        "can_complete_tasks": False,
        "exclude_tools": [],
    }
    assert kwargs["tools"][0]["name"] == "lookup"


def test_tool_format_in_agent_params_warns_and_is_dropped() -> None:
    template = MAILAgentTemplate(
        "alpha",
        complete_immediately_factory,
        ["beta"],
        agent_params={"tool_format": "completions", "keep": 1},
        tool_format="responses",
    )
    with pytest.warns(DeprecationWarning, match="tool_format"):
        agent = template.instantiate()
    assert recorded(agent)["tool_format"] == "responses"
    assert recorded(agent)["keep"] == 1
    assert template.agent_params == {"tool_format": "completions", "keep": 1}  # untouched


def test_instantiate_without_tool_format_in_params_does_not_warn() -> None:
    template = MAILAgentTemplate("alpha", complete_immediately_factory, ["beta"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        template.instantiate()


def test_factory_given_as_python_string() -> None:
    for ref in (
        "python::support.scripted_agents:complete_immediately_factory",
        "support.scripted_agents:complete_immediately_factory",
    ):
        agent = MAILAgentTemplate("a", ref, ["b"]).instantiate()
        assert isinstance(agent.function, ScriptedAgent)
        assert recorded(agent)["name"] == "a"
        assert agent.factory == ref


def test_factory_rejecting_kwargs_names_the_agent() -> None:
    def strict_factory(name: str, comm_targets: list[str]) -> Any:
        return ScriptedAgent(name)

    with pytest.raises(TypeError, match="agent 'a': factory rejected its parameters"):
        MAILAgentTemplate("a", strict_factory, ["b"]).instantiate()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"name": "all"}, "'all' is reserved"),
        ({"name": ""}, "non-empty"),
        ({"name": "w@x"}, "agent name 'w@x' is not valid: an agent name may not contain '@'"),
        ({"tool_format": "chat"}, "tool_format must be"),
        ({"comm_targets": [""]}, "invalid communication target"),
    ],
)
def test_template_validation(kwargs: dict[str, Any], fragment: str) -> None:
    base: dict[str, Any] = {"name": "a", "factory": scripted_factory, "comm_targets": ["b"]}
    with pytest.raises(ValueError, match=fragment):
        MAILAgentTemplate(**{**base, **kwargs})


async def test_mail_agent_call_and_core() -> None:
    template = MAILAgentTemplate(
        "a",
        complete_immediately_factory,
        ["b"],
        actions=[LOOKUP],
        enable_entrypoint=True,
        can_complete_tasks=True,
        tool_format="completions",
    )
    agent = template.instantiate()
    text, calls = await agent([{"role": "user", "content": "hi"}], "required")
    assert text is None and calls[0].tool_name == "task_complete"
    core = agent.to_core()
    assert isinstance(core, AgentCore)
    assert core.function is agent.function
    assert core.comm_targets == ["b"] and core.actions == ["lookup"]
    assert core.enable_entrypoint and core.can_complete_tasks
    assert core.tool_format == "completions"


def test_from_swarm_json_resolves_actions_and_params() -> None:
    data = {
        "name": "alpha",
        "factory": "python::support.scripted_agents:scripted_factory",
        "comm_targets": ["beta"],
        "agent_params": {
            "script": [[{"tool": "task_complete", "args": {"finish_message": "hi"}}]],
            "helper": "python::support.scripted_agents:echo_action",
            "nested": [{"fn": "python::support.scripted_agents:echo_action"}],
        },
        "actions": ["lookup"],
        "can_complete_tasks": True,
        "tool_format": "completions",
    }
    template = MAILAgentTemplate.from_swarm_json(json.dumps(data), {"lookup": LOOKUP})
    assert template.actions == [LOOKUP]
    assert template.agent_params["helper"] is echo_action
    assert template.agent_params["nested"][0]["fn"] is echo_action
    assert template.tool_format == "completions" and template.can_complete_tasks
    kwargs = recorded(template.instantiate())
    assert kwargs["helper"] is echo_action
    assert kwargs["tools"] == [LOOKUP.to_tool_dict(style="completions")]


def test_from_swarm_json_unknown_action_suggests_a_name() -> None:
    data = {
        "name": "alpha",
        "factory": "python::support.scripted_agents:scripted_factory",
        "comm_targets": [],
        "agent_params": {},
        "actions": ["lokup"],
    }
    with pytest.raises(ValueError, match="Did you mean 'lookup'"):
        MAILAgentTemplate.from_swarm_json(data, {"lookup": LOOKUP})
    with pytest.raises(ValueError, match="no action definitions"):
        MAILAgentTemplate.from_swarm_json(data)


def test_to_swarm_json_names_the_factory() -> None:
    template = MAILAgentTemplate("a", scripted_factory, ["b"], actions=[LOOKUP])
    data = template.to_swarm_json()
    assert data["factory"] == "python::support.scripted_agents:scripted_factory"
    assert data["actions"] == ["lookup"]
    assert MAILAgentTemplate.from_swarm_json(data, {"lookup": LOOKUP}).factory == data["factory"]
