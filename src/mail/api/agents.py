"""MAILAgentTemplate (declarative) and MAILAgent (instantiated) agents."""

from __future__ import annotations

import copy
import importlib
import json
import warnings
from collections.abc import Callable
from typing import Any, Literal

from mail.api.actions import MAILAction
from mail.core.agents import AgentCore, AgentFunction, AgentOutput
from mail.core.review import check_review_overrides
from mail.core.team.tool_specs import team_tool_specs, validate_team_tools
from mail.factories.base import default_tool_format
from mail.swarms_json.validation import check_agent_name, validate_agent_from_swarms_json
from mail.utils.echo import echo
from mail.utils.parsing import read_python_string, resolve_prefixed_string_references

# Where `MAILAgentTemplate.from_example` finds the bundled example agents (``EXAMPLES``).
EXAMPLES_MODULE = "mail.examples"


ToolFormat = Literal["completions", "responses"]


def _resolve_factory(factory: str | Callable[..., Any]) -> Callable[..., Any]:
    if isinstance(factory, str):
        resolved = read_python_string(factory)
        if not callable(resolved):
            raise TypeError(f"agent factory '{factory}' did not resolve to a callable")
        return resolved  # type: ignore[no-any-return]
    return factory


def _resolve_agent_params(agent: str, params: dict[str, Any]) -> dict[str, Any]:
    """`params` with their python::/url:: references resolved; a reference that cannot be
    imported is a ValueError naming the agent and the parameter (as a factory's is)."""
    resolved: dict[str, Any] = {}
    for key, value in params.items():
        try:
            resolved[key] = resolve_prefixed_string_references(value)
        except Exception as exc:  # noqa: BLE001 - any import failure is a bad definition
            shown = f" ('{echo(value)}')" if isinstance(value, str) else ""
            raise ValueError(
                f"agent '{echo(agent)}': agent_params '{echo(key)}'{shown} cannot be imported: "
                f"{type(exc).__name__}: {echo(exc)}"
            ) from exc
    return resolved


def agent_wiring(agent: MAILAgent | MAILAgentTemplate) -> dict[str, Any]:
    """What an agent and its template both hold, as keywords of either constructor (an
    agent is built from its template, and a swarm's template is rebuilt from its agents)."""
    return {
        "name": agent.name,
        "factory": agent.factory,
        "actions": agent.actions,
        "agent_params": agent.agent_params,
        "enable_entrypoint": agent.enable_entrypoint,
        "enable_interswarm": agent.enable_interswarm,
        "can_complete_tasks": agent.can_complete_tasks,
        "tool_format": agent.tool_format,
        "review_actions": agent.review_actions,
        "team_tools": agent.team_tools,
    }


class MAILAgent:
    """An agent built by its factory: a function plus wiring."""

    def __init__(
        self,
        name: str,
        factory: str | Callable[..., Any],
        actions: list[MAILAction],
        function: AgentFunction,
        comm_targets: list[str],
        agent_params: dict[str, Any],
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = False,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        review_actions: dict[str, list[str]] | None = None,
        team_tools: list[str] | None = None,
    ) -> None:
        self.name = name
        self.factory = factory
        self.actions = list(actions)
        self.review_actions = dict(review_actions or {})
        self.function = function
        self.comm_targets = list(comm_targets)
        self.agent_params = agent_params
        self.enable_entrypoint = enable_entrypoint
        self.enable_interswarm = enable_interswarm
        self.can_complete_tasks = can_complete_tasks
        self.tool_format = tool_format
        self.exclude_tools = list(exclude_tools or [])
        self.team_tools = validate_team_tools(team_tools, name)
        self._validate()

    def _validate(self) -> None:
        check_agent_name(self.name)
        if not callable(self.function):
            raise TypeError(f"agent '{self.name}' function is not callable")

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: Any = "required"
    ) -> AgentOutput:
        return await self.function(messages, tool_choice)

    def to_core(self) -> AgentCore:
        return AgentCore(
            function=self.function,
            comm_targets=list(self.comm_targets),
            actions=[a.name for a in self.actions],
            enable_entrypoint=self.enable_entrypoint,
            enable_interswarm=self.enable_interswarm,
            can_complete_tasks=self.can_complete_tasks,
            tool_format=self.tool_format,
            team_tools=tuple(self.team_tools),
            exclude_tools=tuple(self.exclude_tools),
        )

    def _to_template(self, names: list[str]) -> MAILAgentTemplate:
        return MAILAgentTemplate(
            **agent_wiring(self),
            comm_targets=[t for t in self.comm_targets if t in names or "@" in t],
            exclude_tools=self.exclude_tools,
        )


class MAILAgentTemplate:
    """How to build an agent: factory, wiring, actions and parameters."""

    def __init__(
        self,
        name: str,
        factory: str | Callable[..., Any],
        comm_targets: list[str],
        actions: list[MAILAction] | None = None,
        agent_params: dict[str, Any] | None = None,
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = False,
        tool_format: ToolFormat | None = None,
        exclude_tools: list[str] | None = None,
        review_actions: dict[str, list[str]] | None = None,
        team_tools: list[str] | None = None,
    ) -> None:
        self.name = name
        self.factory = factory
        self.comm_targets = list(comm_targets)
        self.actions = list(actions or [])
        self.agent_params = dict(agent_params or {})
        self.enable_entrypoint = enable_entrypoint
        self.enable_interswarm = enable_interswarm
        self.can_complete_tasks = can_complete_tasks
        self.tool_format: ToolFormat = tool_format or default_tool_format(
            self.agent_params.get("api_base")
        )
        self.exclude_tools = list(exclude_tools or [])
        # Opt-in team tool groups: reply_wait, threads, inbox, files (mail.core.team).
        self.team_tools = validate_team_tools(team_tools, name)
        self._validate()
        # Per-agent override of the actions' own `review` ([] switches review off).
        self.review_actions = check_review_overrides(
            self.name, review_actions, [a.name for a in self.actions]
        )

    def _validate(self) -> None:
        check_agent_name(self.name)
        if self.tool_format not in ("completions", "responses"):
            raise ValueError(
                f"agent '{self.name}' tool_format must be 'completions' or 'responses', "
                f"got '{self.tool_format}'"
            )
        for target in self.comm_targets:
            if not isinstance(target, str) or not target:
                raise ValueError(
                    f"agent '{self.name}' has an invalid communication target {target!r}"
                )

    def _top_level_params(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "comm_targets": list(self.comm_targets),
            "tools": self.tool_specs(),
            "enable_entrypoint": self.enable_entrypoint,
            "enable_interswarm": self.enable_interswarm,
            "tool_format": self.tool_format,
            "can_complete_tasks": self.can_complete_tasks,
            "exclude_tools": list(self.exclude_tools),
        }

    def tool_specs(self) -> list[dict[str, Any]]:
        """The specs of the agent's actions and team tools, as its factory gets them."""
        # Team tools are offered like action tools; those named like a MAIL tool replace the
        # built-in one.
        return [a.to_tool_dict(style=self.tool_format) for a in self.actions] + team_tool_specs(
            self.team_tools,
            self.comm_targets,
            style=self.tool_format,
            enable_interswarm=self.enable_interswarm,
            exclude_tools=self.exclude_tools,
        )

    def factory_kwargs(self) -> dict[str, Any]:
        """The keyword arguments the factory gets from the template (no instance params)."""
        params = {k: v for k, v in self.agent_params.items() if k != "tool_format"}
        return {**self._top_level_params(), **params}

    def instantiate(
        self,
        instance_params: dict[str, Any] | None = None,
        additional_exclude_tools: list[str] | None = None,
    ) -> MAILAgent:
        """Call the factory with the documented three-layer keyword arguments."""
        exclude = sorted(set(self.exclude_tools) | set(additional_exclude_tools or []))
        params = dict(self.agent_params)
        if "tool_format" in params:
            warnings.warn(
                f"agent '{self.name}': 'tool_format' inside agent_params is ignored; "
                "set it on the agent template instead",
                DeprecationWarning,
                stacklevel=2,
            )
            params.pop("tool_format")
        kwargs: dict[str, Any] = {**self._top_level_params(), **params, **(instance_params or {})}
        kwargs["exclude_tools"] = exclude
        factory = _resolve_factory(self.factory)
        try:
            function = factory(**kwargs)
        except TypeError as exc:
            raise TypeError(f"agent '{self.name}': factory rejected its parameters: {exc}") from exc
        return MAILAgent(
            **agent_wiring(self),
            function=function,
            comm_targets=self.comm_targets,
            exclude_tools=exclude,
        )

    # ------------------------------------------------------------------ loaders
    @classmethod
    def from_swarm_json(
        cls,
        json_dump: str | dict[str, Any],
        actions_by_name: dict[str, MAILAction] | None = None,
    ) -> MAILAgentTemplate:
        """An agent template from a swarms.json entry (JSON text or dict), checked first: a
        missing or mistyped field is a ValueError naming it. `actions_by_name` resolves the
        names in its ``actions`` list."""
        data = json.loads(json_dump) if isinstance(json_dump, str) else json_dump
        validate_agent_from_swarms_json(data)
        return cls.from_swarms_json(data, actions_by_name)

    @classmethod
    def from_swarms_json(
        cls,
        agent_data: dict[str, Any],
        actions_by_name: dict[str, MAILAction] | None = None,
    ) -> MAILAgentTemplate:
        """An agent template from an entry already checked (``build_agent_from_swarms_json``)."""
        data = agent_data
        actions_by_name = actions_by_name or {}
        actions: list[MAILAction] = []
        for ref in data.get("actions") or []:
            if isinstance(ref, dict):
                actions.append(MAILAction.from_swarm_json(ref))
                continue
            if ref not in actions_by_name:
                from mail.swarms_json import suggest

                if not actions_by_name:
                    raise ValueError(
                        f"agent '{data['name']}' declares actions but no action definitions were provided"
                    )
                raise ValueError(
                    f"agent '{data['name']}' references unknown action '{ref}'."
                    + suggest(ref, actions_by_name)
                )
            actions.append(actions_by_name[ref])
        params = data.get("agent_params") or {}
        params = {k: v for k, v in params.items() if k != "tool_format"}
        return cls(
            name=data["name"],
            factory=data["factory"],
            comm_targets=list(data.get("comm_targets") or []),
            actions=actions,
            agent_params=_resolve_agent_params(data["name"], copy.deepcopy(params)),
            enable_entrypoint=bool(data.get("enable_entrypoint", False)),
            enable_interswarm=bool(data.get("enable_interswarm", False)),
            can_complete_tasks=bool(data.get("can_complete_tasks", False)),
            tool_format=data.get("tool_format"),
            exclude_tools=list(data.get("exclude_tools") or []),
            review_actions=data.get("review_actions"),
            team_tools=data.get("team_tools"),
        )

    @classmethod
    def from_example(cls, name: str, comm_targets: list[str]) -> MAILAgentTemplate:
        """A bundled example agent: supervisor, weather, math, consultant or analyst."""
        # Looked up by name when asked for: the examples are built on this package (their
        # actions are MAILActions), so importing them here would make a cycle.
        examples: dict[str, Any] = importlib.import_module(EXAMPLES_MODULE).EXAMPLES
        spec = examples.get(name)
        if spec is None:
            from mail.swarms_json import suggest

            raise ValueError(f"unknown example agent '{name}'." + suggest(name, examples))
        return cls(
            name=name,
            factory=spec.factory,
            comm_targets=comm_targets,
            actions=list(spec.actions_factory()) if spec.actions_factory else [],
            agent_params=copy.deepcopy(spec.agent_params),
            enable_entrypoint=spec.enable_entrypoint,
            can_complete_tasks=spec.can_complete_tasks,
            tool_format=spec.tool_format,  # type: ignore[arg-type]
        )

    def to_swarm_json(self) -> dict[str, Any]:
        factory = (
            self.factory
            if isinstance(self.factory, str)
            else (f"python::{self.factory.__module__}:{self.factory.__qualname__}")
        )
        extra: dict[str, Any] = {"team_tools": list(self.team_tools)} if self.team_tools else {}
        return {
            "name": self.name,
            "factory": factory,
            "comm_targets": list(self.comm_targets),
            "actions": [a.name for a in self.actions],
            "agent_params": self.agent_params,
            "enable_entrypoint": self.enable_entrypoint,
            "enable_interswarm": self.enable_interswarm,
            "can_complete_tasks": self.can_complete_tasks,
            "tool_format": self.tool_format,
            "exclude_tools": list(self.exclude_tools),
            **({"review_actions": dict(self.review_actions)} if self.review_actions else {}),
            **extra,
        }

    def __repr__(self) -> str:
        return f"MAILAgentTemplate(name={self.name!r})"
