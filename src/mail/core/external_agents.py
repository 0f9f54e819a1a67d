"""Agents that live outside the runtime (an MCP client joined to a swarm instance)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mail.core.agent_wiring import function_chain
from mail.core.agents import AgentCore
from mail.core.message import MAILMessage

if TYPE_CHECKING:
    from mail.core.runtime import MAILRuntime

Sink = Callable[[str, MAILMessage], Awaitable[None]]

# Every team group: the inbox holds what it is sent, reply waits and threads work both ways.
EXTERNAL_TEAM_TOOLS: tuple[str, ...] = ("reply_wait", "threads", "inbox", "files")
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_TARGET_KEYS = ("target", "recipient")


async def _never_called(messages: list[dict[str, Any]], tool_choice: Any = None) -> Any:
    raise RuntimeError("an external agent is never given a model turn")


@dataclass
class ExternalAgentCore(AgentCore):
    """An agent whose messages go to `sink` instead of a model turn."""

    function: Any = _never_called
    name: str = ""
    description: str = ""
    sink: Sink | None = None
    owner: dict[str, Any] = field(default_factory=dict)  # who joined it (for listings)
    member: Any = None  # the front door's record of it (mcp_face.members.Member)

    async def receive(self, task_id: str, message: MAILMessage) -> None:
        if self.sink is not None:
            await self.sink(task_id, message)


class JoinError(ValueError):
    """A join that cannot happen; the text says why."""


def external_agents(rt: MAILRuntime) -> dict[str, ExternalAgentCore]:
    return {n: a for n, a in rt.agents.items() if isinstance(a, ExternalAgentCore)}


def check_name(rt: MAILRuntime, name: str) -> str:
    """A valid, free agent name or JoinError (never shadows an agent, the user or the swarm)."""
    name = str(name or "").strip()
    if not NAME_PATTERN.match(name):
        raise JoinError(
            f"invalid agent name {name!r}: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter"
        )
    taken = {rt.swarm_name, rt.user_id, "all", "user", "system", *rt.agents}
    clash = next((t for t in taken if t.casefold() == name.casefold()), None)
    if clash is not None:  # no look-alikes that differ only in case
        raise JoinError(f"the name '{name}' is taken in this swarm ('{clash}'); pick another")
    return name


def holder(rt: MAILRuntime, name: str) -> ExternalAgentCore | None:
    """The external agent whose name equals `name` but for case, if any."""
    folded = str(name or "").strip().casefold()
    return next((a for n, a in external_agents(rt).items() if n.casefold() == folded), None)


def join(rt: MAILRuntime, name: str, description: str, sink: Sink) -> ExternalAgentCore:
    """Add an external agent named `name` (checked with `check_name`) to the runtime."""
    name = check_name(rt, name)
    others = list(rt.agents)
    agent = ExternalAgentCore(
        name=name,
        comm_targets=list(others),
        team_tools=EXTERNAL_TEAM_TOOLS,
        description=description,
        sink=sink,
    )
    for other in rt.agents.values():
        _add_target(other, name)
    rt.agents[name] = agent
    return agent


def leave(rt: MAILRuntime, name: str, agent: ExternalAgentCore | None = None) -> bool:
    """Remove the external agent `name` (only if it is `agent`, when given); False when
    there is none, so a stale session never removes a newer agent of its name."""
    current = rt.agents.get(name)
    if not isinstance(current, ExternalAgentCore) or agent not in (None, current):
        return False
    agent = current
    del rt.agents[name]
    agent.sink = None
    for other in rt.agents.values():
        _drop_target(other, name)
    rt.turns.forget_agent(name)
    return True


def _add_target(agent: AgentCore, name: str) -> None:
    if name not in agent.comm_targets:
        agent.comm_targets.append(name)
    for fn in function_chain(agent.function):
        targets = getattr(fn, "comm_targets", None)
        if isinstance(targets, list) and targets is not agent.comm_targets and name not in targets:
            targets.append(name)
        for spec in getattr(fn, "tools", None) or []:
            for enum in _target_enums(spec):
                if name not in enum:
                    enum.append(name)


def _drop_target(agent: AgentCore, name: str) -> None:
    if name in agent.comm_targets:
        agent.comm_targets.remove(name)
    for fn in function_chain(agent.function):
        targets = getattr(fn, "comm_targets", None)
        if isinstance(targets, list) and name in targets:
            targets.remove(name)
        for spec in getattr(fn, "tools", None) or []:
            for enum in _target_enums(spec):
                if name in enum:
                    enum.remove(name)


def _target_enums(spec: Any) -> list[list[Any]]:
    """The `enum` lists of a tool spec's recipient parameters (both tool formats)."""
    if not isinstance(spec, dict):
        return []
    params = spec.get("parameters")
    if params is None and isinstance(spec.get("function"), dict):
        params = spec["function"].get("parameters")
    props = params.get("properties") if isinstance(params, dict) else None
    if not isinstance(props, dict):
        return []
    found = []
    for key in _TARGET_KEYS:
        prop = props.get(key)
        if isinstance(prop, dict) and isinstance(prop.get("enum"), list):
            found.append(prop["enum"])
    return found
