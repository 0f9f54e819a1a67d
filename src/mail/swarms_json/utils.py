"""Loading swarms.json files and turning their entries into validated, defaulted dicts."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, cast

from mail.swarms_json.suggestions import suggest
from mail.swarms_json.types import (
    SwarmsJSONAction,
    SwarmsJSONAgent,
    SwarmsJSONFile,
    SwarmsJSONSwarm,
)
from mail.swarms_json.validation import (
    validate_action_from_swarms_json,
    validate_agent_from_swarms_json,
    validate_swarm_from_swarms_json,
)

__all__ = [
    "AGENT_DEFAULTS",
    "SWARM_DEFAULTS",
    "build_action_from_json",
    "build_action_from_swarms_json",
    "build_agent_from_json",
    "build_agent_from_swarms_json",
    "build_swarm_from_json",
    "build_swarm_from_swarms_json",
    "build_swarms_from_json",
    "build_swarms_from_swarms_json",
    "find_swarm",
    "invalid_json",
    "load_swarm_from_json_file",
    "load_swarms_json_from_file",
    "load_swarms_json_from_string",
    "read_swarms_json_file",
    "suggest",
    "validate_action_from_swarms_json",
    "validate_agent_from_swarms_json",
    "validate_swarm_from_swarms_json",
]

# Optional fields and their defaults. Values are templates: lists are copied per use.
SWARM_DEFAULTS: dict[str, Any] = {
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
AGENT_DEFAULTS: dict[str, Any] = {
    "enable_entrypoint": False,
    "enable_interswarm": False,
    "can_complete_tasks": False,
    "tool_format": "responses",
    "actions": [],
    "exclude_tools": [],
}

PathLike = str | os.PathLike[str]


def invalid_json(what: str, exc: json.JSONDecodeError) -> json.JSONDecodeError:
    """`exc` with `what` named in its message; still a JSONDecodeError (a ValueError), the
    error v1.3's loaders raised for text that is not JSON."""
    return json.JSONDecodeError(f"{what} is not valid JSON: {exc.msg}", exc.doc, exc.pos)


def read_swarms_json_file(path: PathLike) -> list[dict[str, Any]]:
    """Read a swarms.json file; it must hold a JSON list (entries are not validated here)."""
    with Path(path).open(encoding="utf-8") as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise invalid_json(f"swarms.json file at {path}", exc) from exc
    return _swarm_list(data, f"swarms.json file at {path}")


def _swarm_list(data: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise ValueError(
            f"{what} must contain a list of swarms, actually got {type(data).__name__}"
        )
    return data


def load_swarms_json_from_file(path: PathLike) -> SwarmsJSONFile:
    """Read and validate a swarms.json file: ``{"swarms": [...]}`` with its entries as written.

    The v1.3 entry point; `read_swarms_json_file` reads without validating, and
    `build_swarms_from_json` validates and fills in defaults.
    """
    swarms = read_swarms_json_file(path)
    for swarm in swarms:
        validate_swarm_from_swarms_json(swarm)
    return {"swarms": cast(list[SwarmsJSONSwarm], swarms)}


def load_swarms_json_from_string(contents: str) -> SwarmsJSONFile:
    """`load_swarms_json_from_file` for a swarms.json document held in a string."""
    try:
        data = json.loads(contents)
    except json.JSONDecodeError as exc:
        raise invalid_json("swarms.json string", exc) from exc
    swarms = _swarm_list(data, "swarms.json string")
    for swarm in swarms:
        validate_swarm_from_swarms_json(swarm)
    return {"swarms": cast(list[SwarmsJSONSwarm], swarms)}


def _with_defaults(entry: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``entry`` with missing optional fields filled in.

    Lists are copied so that callers can't alias each other's (or the defaults') lists.
    """
    built = {key: list(value) if isinstance(value, list) else value for key, value in entry.items()}
    for key, default in defaults.items():
        if key not in built:
            built[key] = list(default) if isinstance(default, list) else default
    return built


def build_action_from_json(action_candidate: dict[str, Any]) -> SwarmsJSONAction:
    """Validate one action entry and return a copy of it."""
    validate_action_from_swarms_json(action_candidate)
    return cast(SwarmsJSONAction, _with_defaults(action_candidate, {}))


def _build_agent(candidate: dict[str, Any]) -> SwarmsJSONAgent:
    params = dict(candidate["agent_params"])
    # An agent pointed at its own server (`api_base`) defaults to Chat Completions, as the
    # factories do (mail.factories.base.default_tool_format).
    default_format = "completions" if params.get("api_base") else AGENT_DEFAULTS["tool_format"]
    built = _with_defaults(candidate, {**AGENT_DEFAULTS, "tool_format": default_format})
    if "tool_format" in params:
        # The agent-level field is authoritative; the nested one was an old spelling.
        warnings.warn(
            f"agent '{candidate['name']}': 'tool_format' inside agent_params is deprecated "
            f"and ignored; set 'tool_format' on the agent itself "
            f"(using '{built['tool_format']}')",
            DeprecationWarning,
            stacklevel=3,
        )
        del params["tool_format"]
    built["agent_params"] = params
    return cast(SwarmsJSONAgent, built)


def build_agent_from_json(agent_candidate: dict[str, Any]) -> SwarmsJSONAgent:
    """Validate one agent entry and return a copy with defaults filled in."""
    validate_agent_from_swarms_json(agent_candidate)
    return _build_agent(agent_candidate)


def build_swarm_from_json(swarm_candidate: dict[str, Any]) -> SwarmsJSONSwarm:
    """Validate one swarm entry (once) and return a copy with every default filled in."""
    validate_swarm_from_swarms_json(swarm_candidate)
    built = _with_defaults(swarm_candidate, SWARM_DEFAULTS)
    built["agents"] = [_build_agent(agent) for agent in swarm_candidate["agents"]]
    built["actions"] = [dict(action) for action in swarm_candidate["actions"]]
    return cast(SwarmsJSONSwarm, built)


def build_swarms_from_json(contents: list[dict[str, Any]]) -> list[SwarmsJSONSwarm]:
    """Validate and default every swarm of a swarms.json list.

    All entries are checked, not just the one a caller will pick, so a broken
    definition anywhere in the file is reported at load time.
    """
    if not isinstance(contents, list):
        raise ValueError(
            f"swarms.json must contain a list of swarms, actually got {type(contents).__name__}"
        )
    built = [build_swarm_from_json(candidate) for candidate in contents]
    seen: set[str] = set()
    for swarm in built:
        if swarm["name"] in seen:
            # Lookups by name would silently take the first one.
            raise ValueError(f"two swarms are named '{swarm['name']}'; swarm names must be unique")
        seen.add(swarm["name"])
    return built


def find_swarm(swarms: list[Any], name: str, path: PathLike = "swarms.json") -> Any:
    """Return the first swarm called ``name``; ValueError (with a suggestion) if there is none."""
    names = [s["name"] for s in swarms if isinstance(s, dict) and isinstance(s.get("name"), str)]
    for swarm in swarms:
        if isinstance(swarm, dict) and swarm.get("name") == name:
            return swarm
    hint = suggest(name, names)  # (v1.3's text, with a sentence more when a name is close)
    raise ValueError(f"swarm '{name}' not found in {path}" + (f".{hint}" if hint else ""))


def load_swarm_from_json_file(swarm_name: str, path: PathLike = "swarms.json") -> SwarmsJSONSwarm:
    """Load ``path``, validate every swarm in it, and return the one called ``swarm_name``."""
    swarms = build_swarms_from_json(read_swarms_json_file(path))
    return cast(SwarmsJSONSwarm, find_swarm(swarms, swarm_name, path))


# The v1.3 names of the builders (the same functions).
build_action_from_swarms_json = build_action_from_json
build_agent_from_swarms_json = build_agent_from_json
build_swarm_from_swarms_json = build_swarm_from_json
build_swarms_from_swarms_json = build_swarms_from_json
