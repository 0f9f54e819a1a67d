"""Which tools an agent may call: exactly the ones it was offered.

The offered set comes from the agent function's own tool list when it has one (so the check
and the list cannot drift), else from the bundled factories' spec builders for the same wiring.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import Any

from mail.core.agent_wiring import function_chain
from mail.core.agents import AgentCore
from mail.core.team.tool_specs import TEAM_TOOL_GROUPS, team_tool_specs
from mail.core.tools import (
    SUPERVISOR_ONLY_TOOL_NAMES,
    create_mail_tools,
    create_supervisor_tools,
    get_tool_name,
)

logger = logging.getLogger("mail.runtime")

# Produced by the agent function or the provider, never offered as tools.
TEXT_OUTPUT = "text_output"  # a plain-text answer (no tool call)
SYNTHETIC_TOOL_NAMES = frozenset({TEXT_OUTPUT, "web_search_call", "code_interpreter_call"})
_INTERSWARM_TOOLS = frozenset({"send_interswarm_broadcast", "discover_swarms"})
# MAIL tools that only concern the calling agent itself (waiting, help, broadcast receipts).
SELF_TOOL_NAMES = frozenset({"await_message", "help", "acknowledge_broadcast", "ignore_broadcast"})


def _names(specs: Iterable[Any]) -> frozenset[str]:
    names: set[str] = set()
    for spec in specs:
        if isinstance(spec, dict):
            try:
                names.add(get_tool_name(spec))
            except ValueError:
                continue
    return frozenset(names)


def function_tool_names(function: Any) -> frozenset[str] | None:
    """The tool names an agent function sends to its model, or None if it cannot say.

    Wrappers (a supervisor around its inner function) are looked through; the innermost
    function that lists its tools is the one that talks to the model.
    """
    lister = None
    for current in function_chain(function):
        for attr in ("all_tools", "build_tools"):
            candidate = getattr(current, attr, None)
            if callable(candidate):
                lister = candidate
                break
    if lister is None:
        return None
    try:
        return _names(lister())
    except Exception:  # noqa: BLE001 - a broken custom lister falls back to the wiring
        logger.warning("could not list the tools of %r; using its wiring", function, exc_info=True)
        return None


def wiring_tool_names(agent: AgentCore, swarm_exclude: Iterable[str] = ()) -> frozenset[str]:
    """The tools the bundled factories offer an agent with this wiring."""
    mail_names = _wiring_mail_tool_names(
        tuple(agent.comm_targets),
        tuple(agent.team_tools),
        agent.tool_format,
        agent.enable_interswarm,
        agent.can_complete_tasks,
        (*agent.exclude_tools, *swarm_exclude),
    )
    return _union(mail_names, frozenset(agent.actions))


@functools.lru_cache(maxsize=256)
def _wiring_mail_tool_names(
    targets: tuple[str, ...],
    team_tools: tuple[str, ...],
    style: Any,
    enable_interswarm: bool,
    can_complete_tasks: bool,
    exclude: tuple[str, ...],
) -> frozenset[str]:
    # Cached: building the specs deep-copies their schemas (~0.5 ms an agent), and agents of
    # one swarm, and the same swarm in every caller's instance, share a few wirings.
    team = team_tool_specs(
        team_tools,
        list(targets),
        style=style,
        enable_interswarm=enable_interswarm,
        exclude_tools=list(exclude),
    )
    specs: list[dict[str, Any]] = []
    if targets:
        specs += create_mail_tools(list(targets), enable_interswarm, style, list(exclude))
    if can_complete_tasks:
        specs += create_supervisor_tools(
            list(targets),
            can_complete_tasks=True,
            enable_interswarm=enable_interswarm,
            exclude_tools=list(exclude),
            style=style,
            _debug_include_intraswarm=bool(targets),
        )
    return _names(specs) | _names(team)


def offered_tool_names(
    agent: AgentCore, swarm_exclude: Iterable[str] = ()
) -> tuple[frozenset[str], bool]:
    """What `agent` may call (see the module docstring), and whether its function listed it.

    Only a listed set is exact for names outside MAIL (a breakpoint tool the function
    offers that is no action); a set derived from the wiring knows MAIL tools and actions.
    """
    swarm_exclude = list(swarm_exclude)
    always = _always_offered(frozenset((*agent.exclude_tools, *swarm_exclude)))
    listed = function_tool_names(agent.function)
    if listed is None:
        return _union(wiring_tool_names(agent, swarm_exclude), always), False
    return listed | always, True


@functools.lru_cache(maxsize=256)
def _always_offered(excluded: frozenset[str]) -> frozenset[str]:
    return SYNTHETIC_TOOL_NAMES | (SELF_TOOL_NAMES - excluded)


@functools.lru_cache(maxsize=256)
def _union(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    # One set for every instance of a swarm (each instance's runtime keeps its agents'):
    # ~0.7 KB an agent an instance otherwise.
    return a | b


def refusal_reason(tool: str, agent: AgentCore, offered: Iterable[str]) -> str:
    """Why `tool` is not among an agent's tools, in words the agent can act on."""
    if tool in agent.exclude_tools:
        why = "it is excluded for you (exclude_tools)"
    elif tool in _INTERSWARM_TOOLS:
        why = "interswarm tools are offered only to supervisors with enable_interswarm"
    elif tool == "task_complete":
        why = "only agents that can complete tasks (can_complete_tasks) are offered it"
    elif tool in SUPERVISOR_ONLY_TOOL_NAMES:
        why = "it is offered only to supervisors"
    elif any(tool in names for names in TEAM_TOOL_GROUPS.values()):
        groups = [g for g, names in TEAM_TOOL_GROUPS.items() if tool in names]
        why = f"it needs the team_tools group {' or '.join(repr(g) for g in groups)}"
    else:
        why = "it is not one of the tools you were offered"
    usable = sorted(set(offered) - SYNTHETIC_TOOL_NAMES)
    return f"you may not call '{tool}': {why}. Tools you may call: " + (
        ", ".join(usable) if usable else "none"
    )
