"""Shapes of swarms.json entries after defaults have been filled in."""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["SwarmsJSONAction", "SwarmsJSONAgent", "SwarmsJSONFile", "SwarmsJSONSwarm"]


class SwarmsJSONAction(TypedDict):
    name: str
    description: str
    parameters: dict[str, Any]
    function: str


class SwarmsJSONAgent(TypedDict):
    name: str
    factory: str
    comm_targets: list[str]
    agent_params: dict[str, Any]
    enable_entrypoint: bool
    enable_interswarm: bool
    can_complete_tasks: bool
    tool_format: str
    actions: list[str]
    exclude_tools: list[str]


class SwarmsJSONSwarm(TypedDict):
    name: str
    version: str
    entrypoint: str
    agents: list[SwarmsJSONAgent]
    actions: list[SwarmsJSONAction]
    enable_interswarm: bool
    breakpoint_tools: list[str]
    exclude_tools: list[str]
    action_imports: list[str]
    description: str
    keywords: list[str]
    public: bool
    enable_db_agent_histories: bool
    batch_delivery: bool


class SwarmsJSONFile(TypedDict):
    """A whole swarms.json document: ``{"swarms": [...]}`` (what `load_swarms_json_from_file`
    returns)."""

    swarms: list[SwarmsJSONSwarm]
