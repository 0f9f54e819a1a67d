"""What ``GET /swarm`` tells a caller about the swarm it talks to (pure, no I/O)."""

from __future__ import annotations

from typing import Any


def _values(container: Any) -> list[Any]:
    if isinstance(container, dict):
        return list(container.values())
    return list(container or [])


def _name(item: Any) -> str:
    return str(getattr(item, "name", item))


def describe_agent(agent: Any, default_entrypoint: str) -> dict[str, Any]:
    return {
        "name": agent.name,
        "comm_targets": [str(t) for t in getattr(agent, "comm_targets", None) or []],
        "enable_entrypoint": bool(getattr(agent, "enable_entrypoint", False))
        or agent.name == default_entrypoint,
        "can_complete_tasks": bool(getattr(agent, "can_complete_tasks", False)),
        "enable_interswarm": bool(getattr(agent, "enable_interswarm", False)),
        "actions": [_name(a) for a in getattr(agent, "actions", None) or []],
    }


def describe_action(action: Any, breakpoint_tools: set[str]) -> dict[str, Any]:
    return {
        "name": action.name,
        "description": str(getattr(action, "description", "") or ""),
        "parameters": getattr(action, "parameters", None) or {"type": "object", "properties": {}},
        "breakpoint": action.name in breakpoint_tools,
    }


def describe_swarm(swarm: Any, *, name: str, description: str = "") -> dict[str, Any]:
    """The public shape of ``swarm`` (a template or an instance)."""
    entrypoint = str(getattr(swarm, "entrypoint", "") or "")
    breakpoints = [str(t) for t in getattr(swarm, "breakpoint_tools", None) or []]
    agents = [describe_agent(a, entrypoint) for a in _values(getattr(swarm, "agents", None))]
    known = {a["name"] for a in agents}
    runtime_agents = getattr(getattr(swarm, "runtime", None), "agents", None) or {}
    for agent_name, core in runtime_agents.items():
        if agent_name not in known and hasattr(core, "receive"):  # joined over MCP (mail.mcp_face)
            described = describe_agent(core, entrypoint)
            agents.append(described | {"external": True, "description": core.description})
    actions = {_name(a): a for a in _values(getattr(swarm, "actions", None))}
    for agent in _values(getattr(swarm, "agents", None)):
        for action in getattr(agent, "actions", None) or []:
            if not isinstance(action, str):
                actions.setdefault(action.name, action)
    return {
        "name": name,
        "version": str(getattr(swarm, "version", "") or ""),
        "description": str(getattr(swarm, "description", "") or description or ""),
        "entrypoint": entrypoint,
        "entrypoints": [a["name"] for a in agents if a["enable_entrypoint"]],
        "enable_interswarm": bool(getattr(swarm, "enable_interswarm", False)),
        "breakpoint_tools": breakpoints,
        "agents": agents,
        "actions": [
            describe_action(a, set(breakpoints)) for a in actions.values() if not isinstance(a, str)
        ],
    }
