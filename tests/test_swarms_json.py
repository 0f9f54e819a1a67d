"""mail.swarms_json: loading, validation messages, defaults, lookup."""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mail.swarms_json.utils as sj_utils
from mail import schemas
from mail.swarms_json import (
    build_swarm_from_json,
    build_swarms_from_json,
    find_swarm,
    load_swarm_from_json_file,
    read_swarms_json_file,
    suggest,
    validate_action_from_swarms_json,
    validate_agent_from_swarms_json,
    validate_swarm_from_swarms_json,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def sample_swarm() -> dict[str, Any]:
    return {
        "name": "example",
        "version": "1.3.6",
        "entrypoint": "supervisor",
        "agents": [
            {
                "name": "supervisor",
                "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                "comm_targets": ["weather", "helper@elsewhere"],
                "enable_entrypoint": True,
                "can_complete_tasks": True,
                "agent_params": {"llm": "openai/gpt-5-mini", "system": "be brief"},
            },
            {
                "name": "weather",
                "factory": "python::mail.factories.action:LiteLLMActionAgentFunction",
                "comm_targets": ["supervisor"],
                "actions": ["get_weather"],
                "agent_params": {"llm": "openai/gpt-5-mini"},
            },
        ],
        "actions": [
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "City name"}},
                },
                "function": "python::mail.examples.weather_dummy.actions:get_weather_forecast",
            }
        ],
    }


Mutation = Callable[[dict[str, Any]], None]


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def apply(swarm: dict[str, Any]) -> None:
        target: Any = swarm
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


def _delete(path: tuple[Any, ...]) -> Mutation:
    def apply(swarm: dict[str, Any]) -> None:
        target: Any = swarm
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return apply


def _append_agent(agent: Any) -> Mutation:
    return lambda swarm: swarm["agents"].append(agent)


def _both(*mutations: Mutation) -> Mutation:
    def apply(swarm: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(swarm)

    return apply


SUPERVISOR = ("agents", 0)
WEATHER = ("agents", 1)
ACTION = ("actions", 0)
NAMELESS_AGENT = {"factory": "python::x:y", "comm_targets": [], "agent_params": {}}

# (case id, mutation of the sample swarm, exact error message)
ERROR_CASES: list[tuple[str, Mutation, str]] = [
    # 1. swarm fields
    *[
        (f"swarm-missing-{f}", _delete((f,)), f"swarm candidate must contain {a} '{f}' field")
        for f, a in (
            ("name", "a"),
            ("version", "a"),
            ("entrypoint", "an"),
            ("agents", "an"),
            ("actions", "an"),
        )
    ],
    (
        "swarm-name-type",
        _set(("name",), 1),
        "swarm candidate field 'name' must be a str, actually got int",
    ),
    (
        "swarm-version-type",
        _set(("version",), 1.3),
        "swarm candidate field 'version' must be a str, actually got float",
    ),
    (
        "swarm-agents-type",
        _set(("agents",), {}),
        "swarm candidate field 'agents' must be a list, actually got dict",
    ),
    (
        "swarm-actions-type",
        _set(("actions",), None),
        "swarm candidate field 'actions' must be a list, actually got NoneType",
    ),
    (
        "swarm-interswarm-type",
        _set(("enable_interswarm",), "yes"),
        "swarm candidate field 'enable_interswarm' must be a bool, actually got str",
    ),
    (
        "swarm-breakpoints-type",
        _set(("breakpoint_tools",), "send_request"),
        "swarm candidate field 'breakpoint_tools' must be a list, actually got str",
    ),
    (
        "swarm-exclude-type",
        _set(("exclude_tools",), {}),
        "swarm candidate field 'exclude_tools' must be a list, actually got dict",
    ),
    (
        "swarm-imports-type",
        _set(("action_imports",), "python::a:b"),
        "swarm candidate field 'action_imports' must be a list, actually got str",
    ),
    (
        "swarm-imports-items",
        _set(("action_imports",), ["python::a:b", 3]),
        "swarm candidate field 'action_imports' must be a list of strings",
    ),
    (
        "swarm-breakpoint-items",
        _set(("breakpoint_tools",), [None]),
        "swarm candidate field 'breakpoint_tools' must be a list of strings",
    ),
    # 2. cross checks
    (
        "swarm-name-at",
        _set(("name",), "a@b"),
        "swarm name 'a@b' is not valid: a swarm name may not contain '@': addresses write it "
        "after the '@' of agent@swarm",
    ),
    *[
        (
            f"interswarm-swarm-name-{case}",
            _both(_set(("name",), name), _set(("enable_interswarm",), True)),
            f"swarm name '{name}' is not valid: a swarm name may not contain '@', ':' or "
            "whitespace (interswarm): addresses write it after the '@' of agent@swarm",
        )
        for case, name in (("colon", "a:b"), ("space", "a b"))
    ],
    ("swarm-name-empty", _set(("name",), ""), "swarm name must be a non-empty string"),
    *[
        (
            f"agent-name-{case}",
            _set((*WEATHER, "name"), name),
            f"agent name '{name}' is not valid: an agent name may not contain '@' (it "
            "could never be addressed: agent@swarm splits at the first '@')",
        )
        for case, name in (("at", "w@x"), ("at-end", "w@"))
    ],
    (
        "agent-named-all",
        _set((*WEATHER, "name"), "all"),
        "agent name 'all' is reserved (it addresses every agent); choose another name",
    ),
    (
        "duplicate-agent",
        _set(("agents", 1, "name"), "supervisor"),
        "duplicate agent name 'supervisor'",
    ),
    (
        "entrypoint-typo",
        _set(("entrypoint",), "supervsor"),
        "entrypoint 'supervsor' does not match any agent name. Did you mean 'supervisor'?",
    ),
    (
        "entrypoint-unknown",
        _set(("entrypoint",), "zzz"),
        "entrypoint 'zzz' does not match any agent name.",
    ),
    (
        "no-entrypoint-agent",
        _set((*SUPERVISOR, "enable_entrypoint"), False),
        "no agent has 'enable_entrypoint' set to true; the swarm will reject all incoming messages",
    ),
    (
        "entrypoint-not-enabled",
        _set(("entrypoint",), "weather"),
        "entrypoint agent 'weather' does not have 'enable_entrypoint' set to true",
    ),
    (
        "comm-target-typo",
        _set((*SUPERVISOR, "comm_targets"), ["wether"]),
        "agent 'supervisor' has comm_target 'wether' which is not a defined agent. "
        "Did you mean 'weather'?",
    ),
    (
        "comm-target-unknown",
        _set((*WEATHER, "comm_targets"), ["nobody"]),
        "agent 'weather' has comm_target 'nobody' which is not a defined agent.",
    ),
    (
        "no-supervisor",
        _delete((*SUPERVISOR, "can_complete_tasks")),
        "no agent has 'can_complete_tasks' set to true; no agent will be able to complete tasks",
    ),
    (
        "action-ref-typo",
        _set((*WEATHER, "actions"), ["get_wether"]),
        "agent 'weather' references action 'get_wether' which is not defined in the "
        "swarm's actions. Did you mean 'get_weather'?",
    ),
    (
        "action-ref-unknown",
        _set((*WEATHER, "actions"), ["launch"]),
        "agent 'weather' references action 'launch' which is not defined in the swarm's actions.",
    ),
    # 3a. agent fields
    *[
        (
            f"agent-missing-{f}",
            _delete((*WEATHER, f)),
            f"agent candidate must contain {a} '{f}' field",
        )
        for f, a in (("factory", "a"), ("comm_targets", "a"), ("agent_params", "an"))
    ],
    (
        "agent-missing-name",
        _append_agent(NAMELESS_AGENT),
        "agent candidate must contain a 'name' field",
    ),
    (
        "agent-not-a-dict",
        _append_agent("helper"),
        "agent candidate must be a dict, actually got str",
    ),
    (
        "agent-factory-type",
        _set((*WEATHER, "factory"), ["python::x:y"]),
        "agent candidate field 'factory' must be a str, actually got list",
    ),
    (
        "agent-comm-targets-type",
        _set((*WEATHER, "comm_targets"), "supervisor"),
        "agent candidate field 'comm_targets' must be a list, actually got str",
    ),
    (
        "agent-comm-targets-items",
        _set((*WEATHER, "comm_targets"), ["supervisor", 7]),
        "agent candidate field 'comm_targets' must be a list of strings",
    ),
    (
        "agent-params-type",
        _set((*WEATHER, "agent_params"), []),
        "agent candidate field 'agent_params' must be a dict, actually got list",
    ),
    (
        "agent-entrypoint-type",
        _set((*WEATHER, "enable_entrypoint"), "no"),
        "agent candidate field 'enable_entrypoint' must be a bool, actually got str",
    ),
    (
        "agent-interswarm-type",
        _set((*WEATHER, "enable_interswarm"), 1),
        "agent candidate field 'enable_interswarm' must be a bool, actually got int",
    ),
    (
        "agent-complete-type",
        _set((*SUPERVISOR, "can_complete_tasks"), "true"),
        "agent candidate field 'can_complete_tasks' must be a bool, actually got str",
    ),
    (
        "agent-tool-format-type",
        _set((*WEATHER, "tool_format"), None),
        "agent candidate field 'tool_format' must be a str, actually got NoneType",
    ),
    (
        "agent-actions-type",
        _set((*WEATHER, "actions"), "get_weather"),
        "agent candidate field 'actions' must be a list, actually got str",
    ),
    (
        "agent-exclude-type",
        _set((*WEATHER, "exclude_tools"), "help"),
        "agent candidate field 'exclude_tools' must be a list, actually got str",
    ),
    # 3b. action fields
    *[
        (
            f"action-missing-{f}",
            _delete((*ACTION, f)),
            f"action candidate must contain a '{f}' field",
        )
        for f in ("description", "parameters", "function")
    ],
    (
        "action-parameters-type",
        _set((*ACTION, "parameters"), []),
        "action candidate field 'parameters' must be a dict, actually got list",
    ),
    (
        "action-function-type",
        _set((*ACTION, "function"), None),
        "action candidate field 'function' must be a str, actually got NoneType",
    ),
    (
        "interswarm-action-name-interswarm-tool",
        _both(
            _set(("enable_interswarm",), True),
            _set((*ACTION, "name"), "discover_swarms"),
            _set((*WEATHER, "actions"), ["discover_swarms"]),
        ),
        "action name 'discover_swarms' is reserved: the runtime handles 'discover_swarms' itself "
        "(a MAIL tool, or a model's own output), so the action would never run; choose another "
        "name for the action",
    ),
    (
        "action-name-mail-tool",
        _both(_set((*ACTION, "name"), "help"), _set((*WEATHER, "actions"), ["help"])),
        "action name 'help' is reserved: the runtime handles 'help' itself (a MAIL tool, or a "
        "model's own output), so the action would never run; choose another name for the action",
    ),
    (
        "action-not-a-dict",
        lambda swarm: swarm["actions"].append("get_weather"),
        "action candidate must be a dict, actually got str",
    ),
    # order: swarm fields before cross checks
    (
        "order-swarm-fields-first",
        _both(_set(("entrypoint",), "nobody"), _set(("version",), 2)),
        "swarm candidate field 'version' must be a str, actually got int",
    ),
    # order: cross checks before agent fields
    (
        "order-cross-before-agent-fields",
        _both(_delete((*WEATHER, "factory")), _set(("entrypoint",), "supervisr")),
        "entrypoint 'supervisr' does not match any agent name. Did you mean 'supervisor'?",
    ),
    # order: agent fields before action fields
    (
        "order-agent-before-action-fields",
        _both(_delete((*ACTION, "function")), _delete((*WEATHER, "agent_params"))),
        "agent candidate must contain an 'agent_params' field",
    ),
]


@pytest.mark.parametrize(
    ("mutation", "message"),
    [pytest.param(m, msg, id=case) for case, m, msg in ERROR_CASES],
)
def test_validation_error_messages(mutation: Mutation, message: str) -> None:
    swarm = sample_swarm()
    mutation(swarm)
    with pytest.raises(ValueError) as info:
        validate_swarm_from_swarms_json(swarm)
    assert str(info.value) == message
    with pytest.raises(ValueError) as again:
        build_swarm_from_json(swarm)
    assert str(again.value) == message


def test_sample_and_accepted_variants_validate() -> None:
    validate_swarm_from_swarms_json(sample_swarm())
    # Remote comm targets are not checked against local agents.
    swarm = sample_swarm()
    swarm["agents"][1]["comm_targets"] = ["supervisor", "anyone@anywhere"]
    validate_swarm_from_swarms_json(swarm)
    # Unknown action references are allowed when actions come from imports.
    swarm = sample_swarm()
    swarm["agents"][1]["actions"] = ["mcp_ping"]
    swarm["action_imports"] = ["python::mail.stdlib.mcp.actions:mcp_ping"]
    validate_swarm_from_swarms_json(swarm)
    # The metadata fields are passed through without type checks, as in the original.
    swarm = sample_swarm()
    swarm.update(description=None, keywords="weather", public=1)
    validate_swarm_from_swarms_json(swarm)


def test_swarm_candidate_must_be_a_dict() -> None:
    with pytest.raises(ValueError, match="^swarm candidate must be a dict, actually got list$"):
        validate_swarm_from_swarms_json([])


def test_agent_and_action_validators_directly() -> None:
    validate_agent_from_swarms_json(sample_swarm()["agents"][0])
    validate_action_from_swarms_json(sample_swarm()["actions"][0])
    with pytest.raises(ValueError, match="^agent candidate must contain a 'name' field$"):
        validate_agent_from_swarms_json({})
    with pytest.raises(ValueError, match="^action candidate must contain a 'name' field$"):
        validate_action_from_swarms_json({})


# --------------------------------------------------------------------------- suggestions


@pytest.mark.parametrize(
    ("name", "candidates", "expected"),
    [
        ("supervsor", ["supervisor", "weather"], " Did you mean 'supervisor'?"),
        ("wether", ["supervisor", "weather"], " Did you mean 'weather'?"),
        ("xyz", ["supervisor", "weather"], ""),
        ("anything", [], ""),
        ("math", ["maths", "mat", "path"], " Did you mean 'maths'?"),
    ],
)
def test_suggest(name: str, candidates: list[str], expected: str) -> None:
    assert suggest(name, candidates) == expected


# --------------------------------------------------------------------------- building


def test_build_fills_defaults_and_keeps_the_input_untouched() -> None:
    source = sample_swarm()
    pristine = copy.deepcopy(source)
    built = build_swarm_from_json(source)
    assert source == pristine

    assert {k: built[k] for k in sj_utils.SWARM_DEFAULTS} == {  # type: ignore[literal-required]
        "enable_interswarm": False,
        "breakpoint_tools": [],
        "exclude_tools": [],
        "action_imports": [],
        "description": "",
        "keywords": [],
        "public": False,
        "enable_db_agent_histories": False,
        "batch_delivery": True,
    }
    supervisor, weather = built["agents"]
    assert weather == {
        "name": "weather",
        "factory": "python::mail.factories.action:LiteLLMActionAgentFunction",
        "comm_targets": ["supervisor"],
        "actions": ["get_weather"],
        "agent_params": {"llm": "openai/gpt-5-mini"},
        "enable_entrypoint": False,
        "enable_interswarm": False,
        "can_complete_tasks": False,
        "tool_format": "responses",
        "exclude_tools": [],
    }
    assert supervisor["enable_entrypoint"] is True and supervisor["actions"] == []
    assert built["actions"] == pristine["actions"]

    # No aliasing between the result, the input and the shared defaults.
    built["breakpoint_tools"].append("send_request")
    weather["comm_targets"].append("x")
    weather["agent_params"]["extra"] = 1
    assert source == pristine
    assert sj_utils.SWARM_DEFAULTS["breakpoint_tools"] == []
    assert build_swarm_from_json(source)["breakpoint_tools"] == []


def test_build_keeps_given_values_and_unknown_keys() -> None:
    source = sample_swarm()
    source.update(enable_interswarm=True, public=True, description="d", custom={"k": 1})
    source["agents"][1].update(tool_format="completions", exclude_tools=["help"], note="n")
    built = build_swarm_from_json(source)
    assert built["enable_interswarm"] is True and built["public"] is True
    assert built["description"] == "d" and built["custom"] == {"k": 1}  # type: ignore[typeddict-item]
    weather = built["agents"][1]
    assert weather["tool_format"] == "completions"
    assert weather["exclude_tools"] == ["help"]
    assert weather["note"] == "n"  # type: ignore[typeddict-item]


def test_tool_format_inside_agent_params_is_deprecated_and_dropped() -> None:
    source = sample_swarm()
    source["agents"][1]["agent_params"]["tool_format"] = "completions"
    source["agents"][1]["tool_format"] = "responses"
    with pytest.warns(DeprecationWarning, match="agent 'weather'.*tool_format"):
        built = build_swarm_from_json(source)
    weather = built["agents"][1]
    assert "tool_format" not in weather["agent_params"]
    assert weather["agent_params"] == {"llm": "openai/gpt-5-mini"}
    assert weather["tool_format"] == "responses"  # the agent-level value wins
    assert source["agents"][1]["agent_params"]["tool_format"] == "completions"  # input untouched


def test_no_deprecation_warning_without_nested_tool_format() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_swarm_from_json(sample_swarm())


def test_each_swarm_is_validated_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The original validated every swarm of the file twice; we do it once.
    calls: list[str] = []
    real = sj_utils.validate_swarm_from_swarms_json

    def counting(candidate: Any) -> None:
        calls.append(candidate["name"])
        real(candidate)

    monkeypatch.setattr(sj_utils, "validate_swarm_from_swarms_json", counting)
    second = sample_swarm()
    second["name"] = "second"
    built = build_swarms_from_json([sample_swarm(), second])
    assert [s["name"] for s in built] == ["example", "second"]
    assert calls == ["example", "second"]


def test_build_swarms_validates_every_swarm_not_just_the_first() -> None:
    broken = sample_swarm()
    broken["name"] = "broken"
    broken["entrypoint"] = "nobody"
    with pytest.raises(ValueError, match="entrypoint 'nobody'"):
        build_swarms_from_json([sample_swarm(), broken])
    with pytest.raises(ValueError, match="must contain a list of swarms, actually got dict"):
        build_swarms_from_json(sample_swarm())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- files and lookup


def test_read_swarms_json_file(tmp_path: Path) -> None:
    path = tmp_path / "swarms.json"
    path.write_text(json.dumps([sample_swarm()]), encoding="utf-8")
    assert read_swarms_json_file(path) == [sample_swarm()]
    assert read_swarms_json_file(str(path)) == [sample_swarm()]


@pytest.mark.parametrize(("content", "type_name"), [({"a": 1}, "dict"), ("s", "str"), (3, "int")])
def test_load_rejects_non_list_files(tmp_path: Path, content: Any, type_name: str) -> None:
    path = tmp_path / "swarms.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(ValueError) as info:
        read_swarms_json_file(path)
    assert str(info.value) == (
        f"swarms.json file at {path} must contain a list of swarms, actually got {type_name}"
    )


def test_load_reports_invalid_json_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / "swarms.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(ValueError, match=f"swarms.json file at {path} is not valid JSON"):
        read_swarms_json_file(path)
    with pytest.raises(FileNotFoundError):
        read_swarms_json_file(tmp_path / "absent.json")


def test_find_swarm() -> None:
    swarms = [sample_swarm(), {**sample_swarm(), "name": "other"}]
    assert find_swarm(swarms, "other", "swarms.json") is swarms[1]
    with pytest.raises(ValueError) as info:
        find_swarm(swarms, "exmple", "conf/swarms.json")
    assert (
        str(info.value) == "swarm 'exmple' not found in conf/swarms.json. Did you mean 'example'?"
    )
    with pytest.raises(ValueError) as info:
        find_swarm(swarms, "zzz", "conf/swarms.json")
    assert str(info.value) == "swarm 'zzz' not found in conf/swarms.json"


def test_load_swarm_from_json_file(tmp_path: Path) -> None:
    path = tmp_path / "swarms.json"
    other = {**sample_swarm(), "name": "other"}
    path.write_text(json.dumps([sample_swarm(), other]), encoding="utf-8")
    swarm = load_swarm_from_json_file("other", path)
    assert swarm["name"] == "other" and swarm["public"] is False
    with pytest.raises(ValueError, match=f"swarm 'nope' not found in {path}"):
        load_swarm_from_json_file("nope", path)


# --------------------------------------------------------------------------- documents we ship


def test_swarms_json_documents_validate() -> None:
    """Our sample always; the repository's swarms.json too once it exists."""
    documents: list[tuple[str, Any]] = [("sample", [sample_swarm()])]
    repo_file = REPO_ROOT / "swarms.json"
    if repo_file.is_file():
        documents.append((str(repo_file), read_swarms_json_file(repo_file)))
    for label, data in documents:
        assert schemas.schema_errors(data, schemas.SWARMS_SCHEMA) == [], label
        built = build_swarms_from_json(data)
        assert len(built) == len(data) >= 1, label
        # After defaults, every built swarm also passes the schema (defaults are schema-valid).
        assert schemas.schema_errors(built, schemas.SWARMS_SCHEMA) == [], label
