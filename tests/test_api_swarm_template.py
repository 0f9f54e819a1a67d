"""MAILSwarmTemplate: validation, instantiate, subswarms, adjacency, swarms.json, prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mail import MAILAction, MAILAgentTemplate, MAILSwarmTemplate
from mail.api.prompts import TARGETS_HEADER
from support.scripted_agents import (
    PromptedScriptedAgent,
    ScriptedAgent,
    complete_immediately_factory,
    echo_action,
)

GET_WEATHER = MAILAction(
    "get_weather", "Weather", {"type": "object", "properties": {}}, echo_action
)


def agent(name: str, targets: list[str], **kwargs: Any) -> MAILAgentTemplate:
    return MAILAgentTemplate(name, complete_immediately_factory, targets, **kwargs)


def three_agents() -> list[MAILAgentTemplate]:
    return [
        agent(
            "supervisor",
            ["weather", "math"],
            enable_entrypoint=True,
            can_complete_tasks=True,
            exclude_tools=["await_message"],
        ),
        agent("weather", ["supervisor", "math"], actions=[GET_WEATHER]),
        agent("math", ["supervisor"]),
    ]


def template(**kwargs: Any) -> MAILSwarmTemplate:
    base: dict[str, Any] = {
        "name": "demo",
        "agents": three_agents(),
        "entrypoint": "supervisor",
    }
    return MAILSwarmTemplate(**{**base, **kwargs})


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"entrypoint": "supervisr"},
            "entrypoint agent 'supervisr' not found in swarm. Did you mean 'supervisor'?",
        ),
        ({"entrypoint": "math"}, "entrypoint agent 'math' does not have 'enable_entrypoint'"),
        (
            {"breakpoint_tools": ["get_wether"]},
            "breakpoint tool 'get_wether' not found in swarm. Did you mean 'get_weather'?",
        ),
        (
            {"exclude_tools": ["await_mesage"]},
            "excluded tool 'await_mesage' is not valid. Did you mean 'await_message'?",
        ),
        ({"name": " "}, "swarm name must be a non-empty string"),
        ({"name": "a@b"}, "swarm name 'a@b' is not valid: a swarm name may not contain '@'"),
        ({"agents": []}, "must have at least one agent"),
    ],
)
def test_validation_errors_with_suggestions(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        template(**kwargs)
    assert message in str(info.value)


def test_invalid_comm_target_suggests_the_closest_agent() -> None:
    agents = three_agents()
    agents[2] = agent("math", ["supervisr"])
    with pytest.raises(ValueError) as info:
        template(agents=agents)
    assert str(info.value) == (
        "agent 'math' has invalid communication target 'supervisr'. Did you mean 'supervisor'?"
    )


def test_duplicate_names_missing_completer_and_interswarm_targets() -> None:
    agents = three_agents()
    with pytest.raises(ValueError, match="duplicate agent name 'math'"):
        template(agents=[*agents, agent("math", ["supervisor"])])
    no_completer = [agent("supervisor", ["math"], enable_entrypoint=True), agent("math", [])]
    with pytest.raises(ValueError, match="can_complete_tasks"):
        template(agents=no_completer)
    remote = [agent("supervisor", ["far@away"], enable_entrypoint=True, can_complete_tasks=True)]
    with pytest.raises(ValueError, match="interswarm is not enabled"):
        template(agents=remote)
    assert template(agents=remote, enable_interswarm=True).agents[0].comm_targets == ["far@away"]


def test_breakpoint_tools_may_name_mail_tools_and_actions() -> None:
    t = template(breakpoint_tools=["get_weather", "send_request"], exclude_tools=["help"])
    assert t.breakpoint_tools == ["get_weather", "send_request"]


# ------------------------------------------------------------------------------ instantiate


def test_instantiate_builds_agents_with_swarm_level_excludes_and_instance_params() -> None:
    swarm = template(exclude_tools=["help"], task_message_limit=7).instantiate(
        {"user_token": "tok"}, user_id="u-9", user_role="admin", base_url="http://x:1"
    )
    sup_kwargs = swarm.agents_by_name["supervisor"].function.factory_kwargs  # type: ignore[attr-defined]
    assert sup_kwargs["exclude_tools"] == ["await_message", "help"]
    assert sup_kwargs["user_token"] == "tok"
    weather_kwargs = swarm.agents_by_name["weather"].function.factory_kwargs  # type: ignore[attr-defined]
    assert weather_kwargs["exclude_tools"] == ["help"]
    assert weather_kwargs["tools"] == [GET_WEATHER.to_tool_dict()]
    assert swarm.name == "demo" and swarm.entrypoint == "supervisor"
    assert swarm.user_id == "u-9" and swarm.user_role == "admin"
    assert swarm.task_message_limit == 7 and swarm.base_url == "http://x:1"
    assert set(swarm.actions_by_name) == {"get_weather"}
    assert swarm.swarm_registry is None  # only interswarm swarms get a registry
    assert swarm.runtime.this_owner == "admin:u-9@demo"
    assert swarm.runtime.agents["weather"].actions == ["get_weather"]


def test_agent_without_targets_must_be_entrypoint_and_completer() -> None:
    agents = three_agents()
    agents[2] = agent("math", [])
    with pytest.raises(ValueError, match="agent 'math' has no comm_targets"):
        template(agents=agents).instantiate()


class Inner:
    def __init__(self) -> None:
        self.print_llm_streams = True


class Wrapper:
    """Shaped like the original's wrapper agents: inner functions under known attributes."""

    def __init__(self) -> None:
        self.supervisor_fn = Inner()
        self.action_agent_fn = Inner()
        self._mail_agent = Inner()
        self.print_llm_streams = True

    async def __call__(self, history: list[Any], tool_choice: Any) -> Any:
        raise AssertionError("not called")


def test_print_llm_streams_reaches_wrapped_functions() -> None:
    wrappers: list[Wrapper] = []
    received: list[dict[str, Any]] = []

    def factory(**kwargs: Any) -> Wrapper:
        received.append(kwargs)
        wrappers.append(Wrapper())
        return wrappers[-1]

    t = MAILSwarmTemplate(
        "p",
        agents=[
            MAILAgentTemplate("solo", factory, [], enable_entrypoint=True, can_complete_tasks=True)
        ],
        entrypoint="solo",
    )
    swarm = t.instantiate(print_llm_streams=False)
    [w] = wrappers
    flags = [w.print_llm_streams, w.supervisor_fn.print_llm_streams]
    flags += [w.action_agent_fn.print_llm_streams, w._mail_agent.print_llm_streams]
    assert flags == [False, False, False, False]
    assert swarm.runtime.print_llm_streams is False
    swarm.runtime.set_print_llm_streams(True)
    assert w.supervisor_fn.print_llm_streams and w._mail_agent.print_llm_streams
    # The flag is set on the built function, never passed to the factory.
    assert "print_llm_streams" not in received[0]


# ------------------------------------------------------------------------------ prompts


def prompted_factory(**kwargs: Any) -> Any:
    extra = kwargs.get("extra_tools") or []
    if kwargs.get("prompt") is None:
        fn = ScriptedAgent(kwargs["name"])
        fn.tools = list(kwargs["tools"]) + extra  # type: ignore[attr-defined]
        return fn
    fn = PromptedScriptedAgent(kwargs["name"])
    fn.system = kwargs["prompt"]
    fn.tools = list(kwargs["tools"]) + extra  # type: ignore[attr-defined]
    return fn


def test_system_prompts_are_augmented_with_target_capabilities() -> None:
    agents = [
        MAILAgentTemplate(
            "supervisor",
            prompted_factory,
            ["weather", "math", "plain"],
            agent_params={"prompt": "You are sup."},
            enable_entrypoint=True,
            can_complete_tasks=True,
        ),
        MAILAgentTemplate(
            "weather",
            prompted_factory,
            ["supervisor"],
            agent_params={"prompt": "You are weather.", "extra_tools": [{"type": "web_search"}]},
        ),
        MAILAgentTemplate(
            "math",
            prompted_factory,
            ["supervisor"],
            agent_params={"prompt": "You are math.", "extra_tools": [{"type": "code_interpreter"}]},
        ),
        MAILAgentTemplate("plain", prompted_factory, ["supervisor"]),  # no .system
    ]
    t = MAILSwarmTemplate("sw", agents=agents, entrypoint="supervisor")
    swarm = t.instantiate()
    system = swarm.agents_by_name["supervisor"].function.system  # type: ignore[attr-defined]
    head = f"You are sup.\n\n{TARGETS_HEADER}\n\n"
    assert TARGETS_HEADER == "Here are details about the agents you can communicate with:"
    assert system.startswith(head)
    blocks = system[len(head) :].split("\n\n")
    assert blocks[-1] == ""  # every block ends with a blank line
    names = [b.split("\n")[0] for b in blocks[:-1]]
    assert names == ["Name: weather", "Name: math", "Name: plain"]  # swarm order
    weather, math, plain = blocks[:-1]
    assert weather.split("\n")[1] == "Capabilities:" and "web" in weather.lower()
    assert "code" in math.lower()
    assert len(plain.split("\n")) == 3  # a single "no tools" line
    assert plain.split("\n")[2] not in (weather + math)

    weather_system = swarm.agents_by_name["weather"].function.system  # type: ignore[attr-defined]
    assert weather_system.startswith(f"You are weather.\n\n{TARGETS_HEADER}\n\nName: supervisor")
    assert not hasattr(swarm.agents_by_name["plain"].function, "system")


def test_augmentation_replaces_an_earlier_section_instead_of_stacking() -> None:
    prompt = f"You are sup.\n\n{TARGETS_HEADER}\n\nName: stale\nCapabilities:\n- old\n\n"
    agents = [
        MAILAgentTemplate(
            "supervisor",
            prompted_factory,
            ["math"],
            agent_params={"prompt": prompt},
            enable_entrypoint=True,
            can_complete_tasks=True,
        ),
        MAILAgentTemplate("math", prompted_factory, ["supervisor"]),
    ]
    swarm = MAILSwarmTemplate("sw", agents=agents, entrypoint="supervisor").instantiate()
    system = swarm.agents_by_name["supervisor"].function.system  # type: ignore[attr-defined]
    assert system.count(TARGETS_HEADER) == 1
    assert "stale" not in system and "Name: math" in system


def test_augmentation_edits_the_inner_supervisor_function() -> None:
    inner = PromptedScriptedAgent("inner")
    inner.system = "Inner prompt."

    class Outer:
        supervisor_fn = inner

        async def __call__(self, history: Any, tool_choice: Any) -> Any:
            return await inner(history, tool_choice)

    agents = [
        MAILAgentTemplate(
            "supervisor",
            lambda **kw: Outer(),
            ["math"],
            enable_entrypoint=True,
            can_complete_tasks=True,
        ),
        MAILAgentTemplate("math", complete_immediately_factory, ["supervisor"]),
    ]
    MAILSwarmTemplate("sw", agents=agents, entrypoint="supervisor").instantiate()
    assert inner.system.startswith(f"Inner prompt.\n\n{TARGETS_HEADER}\n\nName: math\n")


# ------------------------------------------------------------------------------ wiring


def test_get_subswarm_filters_targets_and_actions() -> None:
    t = template(breakpoint_tools=["get_weather", "help"], actions=[GET_WEATHER])
    t.agents[1].can_complete_tasks = True  # the subswarm needs a completer of its own
    sub = t.get_subswarm(["weather", "math"], "sub", entrypoint="weather")
    assert sub.name == "demo-sub"
    assert sub.agent_names == ["weather", "math"]
    by_name = {a.name: a for a in sub.agents}
    assert by_name["weather"].comm_targets == ["math"]
    # math only talked to the supervisor: it falls back to another member.
    assert by_name["math"].comm_targets == ["weather"]
    assert sub.entrypoint == "weather" and by_name["weather"].enable_entrypoint
    assert [a.name for a in sub.actions] == ["get_weather"]
    assert sub.breakpoint_tools == ["get_weather", "help"]
    assert t.agents[1].comm_targets == ["supervisor", "math"]  # the original is untouched


def test_get_subswarm_keeps_entrypoint_and_validates() -> None:
    t = template()
    sub = t.get_subswarm(["supervisor", "math"], "lite")
    assert sub.entrypoint == "supervisor"
    assert {a.name: a.comm_targets for a in sub.agents} == {
        "supervisor": ["math"],
        "math": ["supervisor"],
    }
    with pytest.raises(ValueError, match="at least one agent"):
        t.get_subswarm(["nobody"], "x")


def test_update_from_adjacency_matrix() -> None:
    t = template()
    matrix, names = t._build_adjacency_matrix()
    assert names == ["supervisor", "weather", "math"]
    assert matrix == [[0, 1, 1], [1, 0, 1], [1, 0, 0]]
    t.update_from_adjacency_matrix([[1, 0, 1], [1, 0, 0], [1, 1, 0]])
    assert [a.comm_targets for a in t.agents] == [
        ["math"],
        ["supervisor"],
        ["supervisor", "weather"],
    ]
    with pytest.raises(ValueError, match="3x3"):
        t.update_from_adjacency_matrix([[0, 1], [1, 0]])


# ------------------------------------------------------------------------------ swarms.json


def swarm_json(**overrides: Any) -> dict[str, Any]:
    factory = "python::support.scripted_agents:scripted_factory"
    data: dict[str, Any] = {
        "name": "jsonswarm",
        "version": "2.0.0",
        "entrypoint": "supervisor",
        "agents": [
            {
                "name": "supervisor",
                "factory": factory,
                "comm_targets": ["helper"],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "actions": ["echo"],
                "agent_params": {
                    "script": [
                        [{"tool": "echo", "args": {"text": "hi"}}],
                        [
                            {
                                "tool": "send_request",
                                "args": {"target": "helper", "subject": "s", "body": "help me"},
                            }
                        ],
                        [{"tool": "task_complete", "args": {"finish_message": "json swarm done"}}],
                    ]
                },
            },
            {
                "name": "helper",
                "factory": factory,
                "comm_targets": ["supervisor"],
                "agent_params": {
                    "script": [
                        [
                            {
                                "tool": "send_response",
                                "args": {"target": "supervisor", "subject": "r", "body": "helped"},
                            }
                        ]
                    ]
                },
            },
        ],
        "actions": [
            {
                "name": "echo",
                "description": "Echo the input",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
                "function": "python::support.scripted_agents:echo_action",
            }
        ],
        "breakpoint_tools": [],
        "exclude_tools": ["help"],
    }
    data.update(overrides)
    return data


async def test_from_swarm_json_runs_a_task_end_to_end() -> None:
    t = MAILSwarmTemplate.from_swarm_json(json.dumps(swarm_json()), task_message_limit=20)
    assert t.name == "jsonswarm" and t.version == "2.0.0" and t.task_message_limit == 20
    assert [a.name for a in t.actions] == ["echo"]
    assert t.agents[0].actions[0] is t.actions[0]
    swarm = t.instantiate(user_id="u-json")
    response, events = await swarm.post_message("start", show_events=True, timeout=5)
    assert response["message"]["body"] == "json swarm done"
    complete = [e for e in events if e.event == "action_complete"]
    assert complete[0].data["description"].endswith('echo: {"text": "hi"}')
    kwargs = swarm.agents_by_name["supervisor"].function.factory_kwargs  # type: ignore[attr-defined]
    assert kwargs["exclude_tools"] == ["help"]
    assert kwargs["tools"][0]["name"] == "echo"


def test_from_swarm_json_errors() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        MAILSwarmTemplate.from_swarm_json("{nope")
    with pytest.raises(ValueError, match="one swarm object"):
        MAILSwarmTemplate.from_swarm_json("[]")
    bad = swarm_json(entrypoint="supervisr")
    with pytest.raises(ValueError, match="Did you mean 'supervisor'"):
        MAILSwarmTemplate.from_swarm_json(json.dumps(bad))


def test_from_swarm_json_file(tmp_path: Path) -> None:
    other = swarm_json(name="other")
    path = tmp_path / "swarms.json"
    path.write_text(json.dumps([other, swarm_json()]), encoding="utf-8")
    t = MAILSwarmTemplate.from_swarm_json_file("jsonswarm", path)
    assert t.name == "jsonswarm" and t.agent_names == ["supervisor", "helper"]
    with pytest.raises(ValueError, match="Did you mean 'jsonswarm'"):
        MAILSwarmTemplate.from_swarm_json_file("jsonswarn", path)


def test_to_swarm_json_round_trip() -> None:
    t = MAILSwarmTemplate.from_swarm_json(json.dumps(swarm_json()))
    again = MAILSwarmTemplate.from_swarms_json(t.to_swarm_json())
    assert again.to_swarm_json() == t.to_swarm_json()
