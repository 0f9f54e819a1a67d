"""Validation of swarms.json entries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mail.core.message import ALL_AGENTS, is_valid_swarm_name
from mail.core.tool_rights import SYNTHETIC_TOOL_NAMES
from mail.core.tools import MAIL_TOOL_NAMES
from mail.swarms_json.suggestions import suggest
from mail.utils.echo import echo

__all__ = [
    "ACTION_REQUIRED_FIELDS",
    "AGENT_OPTIONAL_FIELDS",
    "AGENT_REQUIRED_FIELDS",
    "SWARM_OPTIONAL_FIELDS",
    "SWARM_REQUIRED_FIELDS",
    "check_action_name",
    "check_agent_name",
    "check_parameters_schema",
    "check_swarm_name",
    "validate_action_from_swarms_json",
    "validate_agent_from_swarms_json",
    "validate_swarm_from_swarms_json",
]

FieldTable = tuple[tuple[str, type], ...]

SWARM_REQUIRED_FIELDS: FieldTable = (
    ("name", str),
    ("version", str),
    ("entrypoint", str),
    ("agents", list),
    ("actions", list),
)
SWARM_OPTIONAL_FIELDS: FieldTable = (
    ("enable_interswarm", bool),
    ("breakpoint_tools", list),
    ("exclude_tools", list),
    ("action_imports", list),
    ("review_ignore_ends_task", bool),
    ("batch_delivery", bool),
)
# List fields whose items must be strings (checked after the field's own type).
SWARM_STRING_LIST_FIELDS = ("action_imports", "breakpoint_tools", "exclude_tools")

AGENT_REQUIRED_FIELDS: FieldTable = (
    ("name", str),
    ("factory", str),
    ("comm_targets", list),
    ("agent_params", dict),
)
AGENT_OPTIONAL_FIELDS: FieldTable = (
    ("enable_entrypoint", bool),
    ("enable_interswarm", bool),
    ("can_complete_tasks", bool),
    ("tool_format", str),
    ("actions", list),
    ("exclude_tools", list),
    ("review_actions", dict),
    ("team_tools", list),
)
AGENT_STRING_LIST_FIELDS = ("comm_targets", "actions", "exclude_tools", "team_tools")

ACTION_REQUIRED_FIELDS: FieldTable = (
    ("name", str),
    ("description", str),
    ("parameters", dict),
    ("function", str),
)
ACTION_OPTIONAL_FIELDS: FieldTable = (("review", list),)


def _check_fields(
    kind: str,
    candidate: Any,
    required: FieldTable,
    optional: FieldTable = (),
    string_lists: tuple[str, ...] = (),
) -> None:
    """Presence and type checks shared by swarms, agents and actions."""
    if not isinstance(candidate, dict):
        raise ValueError(
            f"{kind} candidate must be a dict, actually got {type(candidate).__name__}"
        )
    for field, expected in required:
        if field not in candidate:
            article = "an" if field[0] in "aeio" else "a"
            raise ValueError(f"{kind} candidate must contain {article} '{field}' field")
        _check_type(kind, field, candidate[field], expected)
    for field, expected in optional:
        if field in candidate:
            _check_type(kind, field, candidate[field], expected)
    for field in string_lists:
        items = candidate.get(field, [])
        if not all(isinstance(item, str) for item in items):
            raise ValueError(f"{kind} candidate field '{field}' must be a list of strings")


def _check_type(kind: str, field: str, value: Any, expected: type) -> None:
    # bool is a subclass of int, but no field here is numeric, so isinstance is exact enough.
    if not isinstance(value, expected):
        raise ValueError(
            f"{kind} candidate field '{field}' must be a {expected.__name__}, "
            f"actually got {type(value).__name__}"
        )


def _named(items: list[Any]) -> list[dict[str, Any]]:
    """The entries of ``items`` that are dicts with a string name (cross-checks skip the rest)."""
    return [item for item in items if isinstance(item, dict) and isinstance(item.get("name"), str)]


def _cross_validate(swarm: dict[str, Any]) -> None:
    agents = _named(swarm["agents"])
    agent_names = [agent["name"] for agent in agents]
    entrypoint: str = swarm["entrypoint"]

    interswarm = swarm.get("enable_interswarm") is True
    check_swarm_name(swarm["name"], interswarm)
    for action in _named(swarm["actions"]):
        check_action_name(action["name"], interswarm)
    seen: set[str] = set()
    for name in agent_names:
        check_agent_name(name)
        if name in seen:
            raise ValueError(f"duplicate agent name '{name}'")
        seen.add(name)

    if entrypoint not in seen:
        raise ValueError(
            f"entrypoint '{entrypoint}' does not match any agent name."
            f"{suggest(entrypoint, agent_names)}"
        )
    if not any(agent.get("enable_entrypoint") for agent in agents):
        raise ValueError(
            "no agent has 'enable_entrypoint' set to true; "
            "the swarm will reject all incoming messages"
        )
    entry_agent = next(agent for agent in agents if agent["name"] == entrypoint)
    if not entry_agent.get("enable_entrypoint"):
        raise ValueError(
            f"entrypoint agent '{entrypoint}' does not have 'enable_entrypoint' set to true"
        )

    _check_references(
        agents,
        "comm_targets",
        agent_names,
        "has comm_target '{}' which is not a defined agent.",
        # A remote agent (agent@swarm) is checked when the message is routed.
        local=lambda target: "@" not in target,
    )

    if not any(agent.get("can_complete_tasks") for agent in agents):
        raise ValueError(
            "no agent has 'can_complete_tasks' set to true; no agent will be able to complete tasks"
        )

    # Imported actions are only known once their import strings are resolved (by the
    # template builder), so references can't be checked here when there are any.
    if swarm.get("action_imports"):
        return
    action_names = [action["name"] for action in _named(swarm["actions"])]
    _check_references(
        agents,
        "actions",
        action_names,
        "references action '{}' which is not defined in the swarm's actions.",
    )


def _check_references(
    agents: list[dict[str, Any]],
    field: str,
    known: list[str],
    problem: str,
    local: Callable[[str], bool] = lambda name: True,
) -> None:
    """Every name in each agent's `field` list (those `local` accepts) must be in `known`;
    the first that is not raises ValueError: "agent 'a' " + `problem` with the name, and a
    suggestion."""
    for agent in agents:
        names = agent.get(field)
        for name in names if isinstance(names, list) else []:
            if isinstance(name, str) and local(name) and name not in known:
                raise ValueError(
                    f"agent '{agent['name']}' {problem.format(name)}{suggest(name, known)}"
                )


def validate_swarm_from_swarms_json(swarm_candidate: Any) -> None:
    """Raise ValueError unless ``swarm_candidate`` is a well-formed swarms.json swarm."""
    _check_fields(
        "swarm",
        swarm_candidate,
        SWARM_REQUIRED_FIELDS,
        SWARM_OPTIONAL_FIELDS,
        SWARM_STRING_LIST_FIELDS,
    )
    _cross_validate(swarm_candidate)
    for agent in swarm_candidate["agents"]:
        validate_agent_from_swarms_json(agent)
    for action in swarm_candidate["actions"]:
        validate_action_from_swarms_json(action)


def validate_agent_from_swarms_json(agent_candidate: Any) -> None:
    """Raise ValueError unless ``agent_candidate`` is a well-formed swarms.json agent."""
    _check_fields(
        "agent",
        agent_candidate,
        AGENT_REQUIRED_FIELDS,
        AGENT_OPTIONAL_FIELDS,
        AGENT_STRING_LIST_FIELDS,
    )
    if "team_tools" in agent_candidate:
        from mail.core.team.tool_specs import validate_team_tools

        validate_team_tools(agent_candidate["team_tools"], str(agent_candidate.get("name", "")))


def validate_action_from_swarms_json(action_candidate: Any) -> None:
    """Raise ValueError unless ``action_candidate`` is a well-formed swarms.json action."""
    _check_fields("action", action_candidate, ACTION_REQUIRED_FIELDS, ACTION_OPTIONAL_FIELDS)
    check_action_name(action_candidate["name"])
    if "review" in action_candidate:
        from mail.core.review import normalize_review

        normalize_review(action_candidate["review"], f"action '{action_candidate['name']}'")
    check_parameters_schema(action_candidate["name"], action_candidate["parameters"])


def check_swarm_name(name: Any, interswarm: bool = False) -> None:
    """A swarm name has no '@' (addresses write it after the '@' of agent@swarm); a swarm that
    talks to others follows the registry's rule (`mail.core.message.is_valid_swarm_name`)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("swarm name must be a non-empty string")
    if "@" in name or (interswarm and not is_valid_swarm_name(name)):
        rule = "'@', ':' or whitespace (interswarm)" if interswarm else "'@'"
        raise ValueError(
            f"swarm name '{echo(name)}' is not valid: a swarm name may not contain {rule}: "
            "addresses write it after the '@' of agent@swarm"
        )


def check_agent_name(name: Any) -> None:
    """An agent name must be addressable: a target splits at its first '@'."""
    if not isinstance(name, str) or not name:
        raise ValueError("agent name must be a non-empty string")
    if name == ALL_AGENTS:
        raise ValueError(
            "agent name 'all' is reserved (it addresses every agent); choose another name"
        )
    if "@" in name:
        raise ValueError(
            f"agent name '{echo(name)}' is not valid: an agent name may not contain '@' (it "
            "could never be addressed: agent@swarm splits at the first '@')"
        )


# Tools the runtime handles before any action of the same name; the interswarm tools only
# where interswarm is on (elsewhere an action of their name runs; v1.3 ran it even with
# interswarm on, where here the tool answers: such a swarm is refused, not left to shadow).
RESERVED_ACTION_NAMES = frozenset(MAIL_TOOL_NAMES) | SYNTHETIC_TOOL_NAMES
INTERSWARM_TOOL_NAMES = frozenset({"send_interswarm_broadcast", "discover_swarms"})


def check_action_name(name: str, interswarm: bool = False) -> None:
    """An action may not take the name of a tool the runtime handles itself: the model would be
    offered the action's schema, and every call would run the MAIL tool instead."""
    if name in RESERVED_ACTION_NAMES or (interswarm and name in INTERSWARM_TOOL_NAMES):
        raise ValueError(
            f"action name '{name}' is reserved: the runtime handles '{name}' itself (a MAIL "
            "tool, or a model's own output), so the action would never run; choose another "
            "name for the action"
        )


def check_parameters_schema(action: str, parameters: Any) -> None:
    """An action's ``parameters`` must be an object schema: tools take named arguments."""
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        got = parameters.get("type") if isinstance(parameters, dict) else type(parameters).__name__
        raise ValueError(
            f"action '{action}' field 'parameters' must be a JSON schema with "
            f'"type": "object", got type {got!r}'
        )
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        raise ValueError(
            f"action '{action}' field 'parameters.properties' must be an object, "
            f"got {type(properties).__name__}"
        )
