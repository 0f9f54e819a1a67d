"""MAILSwarmTemplate: a validated blueprint of agents and actions, instantiated per user."""

from __future__ import annotations

import json
import os
from typing import Any

from mail import hooks
from mail.api.actions import MAILAction
from mail.api.agents import MAILAgent, MAILAgentTemplate, agent_wiring
from mail.api.factory_check import check_factory_params, setting_of
from mail.api.prompts import augment_system_prompts
from mail.api.swarm import MAILSwarm, WiredAgents, swarm_settings
from mail.core.message import parse_agent_address
from mail.core.tools import MAIL_TOOL_NAMES
from mail.factories.base import proxy_problem
from mail.factories.demo_model import offline_model_problem
from mail.swarms_json import (
    build_swarm_from_json,
    build_swarms_from_json,
    find_swarm,
    invalid_json,
    read_swarms_json_file,
    suggest,
)
from mail.swarms_json.validation import check_action_name, check_swarm_name
from mail.utils.parsing import read_python_string


class MAILSwarmTemplate(WiredAgents[MAILAgentTemplate]):
    """A swarm definition: agents, actions, entrypoint and swarm-wide options."""

    def __init__(
        self,
        name: str,
        version: str = "1.0.0",
        agents: list[MAILAgentTemplate] | None = None,
        actions: list[MAILAction] | None = None,
        entrypoint: str = "",
        enable_interswarm: bool = False,
        breakpoint_tools: list[str] | None = None,
        exclude_tools: list[str] | None = None,
        task_message_limit: int | None = None,
        description: str = "",
        keywords: list[str] | None = None,
        public: bool = False,
        enable_db_agent_histories: bool | None = None,
        review_ignore_ends_task: bool = True,
        batch_delivery: bool = True,
    ) -> None:
        self.name = name
        self.version = version
        self.agents = list(agents or [])
        self.actions = list(actions or [])
        self.entrypoint = entrypoint
        self.enable_interswarm = enable_interswarm
        self.breakpoint_tools = list(breakpoint_tools or [])
        self.exclude_tools = list(exclude_tools or [])
        self.task_message_limit = task_message_limit
        self.description = description
        self.keywords = list(keywords or [])
        self.public = public
        self.enable_db_agent_histories = enable_db_agent_histories
        # After a reviewer ignores a held action call: end the task (True) or let the agent
        # carry on with the rejection as the call's result (False).
        self.review_ignore_ends_task = review_ignore_ends_task
        # Messages that reach a busy agent are shown to it together at its next turn.
        self.batch_delivery = batch_delivery
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        check_swarm_name(self.name, self.enable_interswarm)
        for action in self.actions:
            check_action_name(action.name, self.enable_interswarm)
        if not self.agents:
            raise ValueError(f"swarm '{self.name}' must have at least one agent")
        names = self.agent_names
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f"duplicate agent name '{name}' in swarm '{self.name}'")
            seen.add(name)
        by_name = {a.name: a for a in self.agents}
        entry = by_name.get(self.entrypoint)
        if entry is None:
            raise ValueError(
                f"entrypoint agent '{self.entrypoint}' not found in swarm."
                + suggest(self.entrypoint, names)
            )
        if not entry.enable_entrypoint:
            raise ValueError(
                f"entrypoint agent '{self.entrypoint}' does not have 'enable_entrypoint' set to true"
            )
        for agent in self.agents:
            for target in agent.comm_targets:
                _, swarm = parse_agent_address(target)
                if swarm and swarm != self.name:
                    if not self.enable_interswarm:
                        raise ValueError(
                            f"agent '{agent.name}' has interswarm communication target '{target}' "
                            f"but interswarm is not enabled for swarm '{self.name}'"
                        )
                    continue
                local = parse_agent_address(target)[0]
                if local not in by_name:
                    raise ValueError(
                        f"agent '{agent.name}' has invalid communication target '{target}'."
                        + suggest(local, names)
                    )
        if not any(a.can_complete_tasks for a in self.agents):
            raise ValueError(
                f"swarm '{self.name}' needs at least one agent with can_complete_tasks=True"
            )
        allowed_breakpoints = set(MAIL_TOOL_NAMES) | {a.name for a in self.actions}
        for agent in self.agents:
            allowed_breakpoints |= {a.name for a in agent.actions}
        for tool in self.breakpoint_tools:
            if tool not in allowed_breakpoints:
                raise ValueError(
                    f"breakpoint tool '{tool}' not found in swarm."
                    + suggest(tool, allowed_breakpoints)
                )
        for tool in self.exclude_tools:
            if tool not in MAIL_TOOL_NAMES:
                raise ValueError(
                    f"excluded tool '{tool}' is not valid." + suggest(tool, MAIL_TOOL_NAMES)
                )
        for agent in self.agents:
            # A template that cannot build its agents fails now, not at a caller's first use.
            check_factory_params(agent.name, agent.factory, agent.factory_kwargs())
            # An unknown `mail/...` model would fail every task later: refuse it now.
            params = agent.agent_params or {}
            problem = offline_model_problem(params.get("llm"))
            if problem:
                raise ValueError(f"agent '{agent.name}': {problem}")
            # So would a LiteLLM proxy (use_proxy, true by default) with no URL to reach it.
            use_proxy = setting_of(agent.factory, params, "use_proxy")
            problem = proxy_problem(
                agent.name, params.get("llm"), use_proxy, params.get("api_base")
            )
            if problem:
                raise ValueError(problem)

    # ------------------------------------------------------------------ instances
    def instantiate(
        self,
        instance_params: dict[str, Any] | None = None,
        user_id: str = "default_user",
        user_role: str = "user",
        base_url: str = "http://localhost:8000",
        registry_file: str | None = None,
        print_llm_streams: bool = True,
    ) -> MAILSwarm:
        for agent in self.agents:
            if not agent.comm_targets and not (
                agent.can_complete_tasks and agent.enable_entrypoint
            ):
                raise ValueError(
                    f"agent '{agent.name}' has no comm_targets, so it must be both an entrypoint "
                    "and able to complete tasks"
                )
        agents: list[MAILAgent] = [
            a.instantiate(instance_params or {}, self.exclude_tools) for a in self.agents
        ]
        augment_system_prompts(agents)
        registry = None
        if self.enable_interswarm:
            from mail.net import SwarmRegistry

            registry = SwarmRegistry(
                self.name,
                base_url,
                registry_file,
                local_swarm_description=self.description,
                local_swarm_keywords=self.keywords,
                local_swarm_public=self.public,
            )
        return MAILSwarm(
            agents=agents,
            actions=self._all_actions(),
            user_id=user_id,
            user_role=user_role,
            swarm_registry=registry,
            print_llm_streams=print_llm_streams,
            base_url=base_url,
            batch_delivery=self.batch_delivery,
            **swarm_settings(self),
        )

    def _all_actions(self) -> list[MAILAction]:
        by_name: dict[str, MAILAction] = {a.name: a for a in self.actions}
        for agent in self.agents:
            for act in agent.actions:
                by_name.setdefault(act.name, act)
        return list(by_name.values())

    # ------------------------------------------------------------------ wiring
    def _build_adjacency_matrix(self) -> tuple[list[list[int]], list[str]]:
        return self.adjacency_matrix, self.agent_names

    def update_from_adjacency_matrix(self, adj: list[list[int]]) -> None:
        self._rewire(adj)
        self._validate()

    def get_subswarm(
        self, names: list[str], name_suffix: str, entrypoint: str | None = None
    ) -> MAILSwarmTemplate:
        chosen = [a for a in self.agents if a.name in names]
        if not chosen:
            raise ValueError("a subswarm needs at least one agent")
        members = [a.name for a in chosen]
        agents = []
        for agent in chosen:
            targets = [t for t in agent.comm_targets if t in members or "@" in t]
            if not targets and len(members) > 1:
                targets = [next(m for m in members if m != agent.name)]
            wiring = agent_wiring(agent)
            wiring["enable_entrypoint"] = agent.enable_entrypoint or agent.name == entrypoint
            agents.append(
                MAILAgentTemplate(**wiring, comm_targets=targets, exclude_tools=agent.exclude_tools)
            )
        settings = swarm_settings(self)
        settings["name"] = f"{self.name}-{name_suffix}"
        settings["entrypoint"] = entrypoint or (
            self.entrypoint if self.entrypoint in members else members[0]
        )
        settings["breakpoint_tools"] = [
            t
            for t in self.breakpoint_tools
            if t in MAIL_TOOL_NAMES or any(t in [x.name for x in ag.actions] for ag in chosen)
        ]
        return MAILSwarmTemplate(
            **settings,
            agents=agents,
            actions=[a for a in self.actions if any(a in ag.actions for ag in chosen)]
            or self.actions,
            public=self.public,
            batch_delivery=self.batch_delivery,
        )

    # ------------------------------------------------------------------ loaders
    @classmethod
    def from_swarms_json(
        cls, swarm_data: dict[str, Any], task_message_limit: int | None = None
    ) -> MAILSwarmTemplate:
        """A template from one swarms.json entry (a dict), validated once."""
        return cls._from_built(build_swarm_from_json(swarm_data), swarm_data, task_message_limit)

    @classmethod
    def _from_built(
        cls, swarm: Any, data: dict[str, Any], task_message_limit: int | None
    ) -> MAILSwarmTemplate:
        """Build from an already validated swarm entry (`data` is the raw entry)."""
        actions: list[MAILAction] = []
        by_name: dict[str, MAILAction] = {}
        for path in swarm.get("action_imports") or []:
            imported = read_python_string(path)
            if not isinstance(imported, MAILAction):
                raise TypeError(
                    f"action import '{path}' in swarm '{swarm['name']}' did not resolve to a MAILAction"
                )
            _add_action(by_name, actions, imported, swarm["name"])
        for raw in swarm.get("actions") or []:
            _add_action(by_name, actions, MAILAction.from_swarms_json(raw), swarm["name"])
        agents = [MAILAgentTemplate.from_swarms_json(a, by_name) for a in swarm["agents"]]
        limit = (
            task_message_limit
            if task_message_limit is not None
            else swarm.get("task_message_limit")
        )
        return cls(
            name=swarm["name"],
            version=swarm["version"],
            agents=agents,
            actions=actions,
            entrypoint=swarm["entrypoint"],
            enable_interswarm=bool(swarm.get("enable_interswarm", False)),
            breakpoint_tools=list(swarm.get("breakpoint_tools") or []),
            exclude_tools=list(swarm.get("exclude_tools") or []),
            task_message_limit=limit,
            description=swarm.get("description") or "",
            keywords=list(swarm.get("keywords") or []),
            public=bool(swarm.get("public", False)),
            # None (absent) persists histories when a store is attached; only an explicit
            # false opts out.
            enable_db_agent_histories=data.get("enable_db_agent_histories"),
            review_ignore_ends_task=bool(data.get("review_ignore_ends_task", True)),
            batch_delivery=bool(swarm.get("batch_delivery", True)),
        )

    @classmethod
    def from_swarm_json(
        cls, json_dump: str, task_message_limit: int | None = None
    ) -> MAILSwarmTemplate:
        """A template from one swarm object as JSON text."""
        try:
            data = json.loads(json_dump)
        except json.JSONDecodeError as exc:
            raise invalid_json("swarm JSON", exc) from exc
        if not isinstance(data, dict):
            raise ValueError(f"swarm JSON must be one swarm object, got {type(data).__name__}")
        return cls.from_swarms_json(data, task_message_limit)

    @classmethod
    def from_swarm_json_file(
        cls,
        swarm_name: str,
        json_filepath: str | os.PathLike[str] = "swarms.json",
        task_message_limit: int | None = None,
    ) -> MAILSwarmTemplate:
        raw_swarms = read_swarms_json_file(json_filepath)
        built_swarms = build_swarms_from_json(raw_swarms)  # validates every swarm, once
        raw = find_swarm(raw_swarms, swarm_name, json_filepath)
        built = built_swarms[raw_swarms.index(raw)]
        return cls._from_built(built, raw, task_message_limit)

    def to_swarm_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "entrypoint": self.entrypoint,
            "enable_interswarm": self.enable_interswarm,
            "breakpoint_tools": self.breakpoint_tools,
            "exclude_tools": self.exclude_tools,
            "description": self.description,
            "keywords": self.keywords,
            "public": self.public,
            "enable_db_agent_histories": self.enable_db_agent_histories,
            **({} if self.review_ignore_ends_task else {"review_ignore_ends_task": False}),
            "batch_delivery": self.batch_delivery,
            "agents": [a.to_swarm_json() for a in self.agents],
            "actions": [a.to_swarm_json() for a in self.actions],
        }

    def start_server(
        self,
        port: int = 8000,
        host: str = "0.0.0.0",
        launch_ui: bool = True,
        ui_port: int = 3000,
        ui_path: str | None = None,
        open_browser: bool = True,
        server_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Serve this template over HTTP (blocks), with the web console at ``/ui`` when
        `launch_ui`. `ui_port`, `ui_path` and `server_url` (v1.3's separate console app) are
        accepted and unused; `kwargs` may override any ``[server]`` key.
        """
        hooks.start_server(
            self,
            port=port,
            host=host,
            launch_ui=launch_ui,
            open_browser=open_browser,
            **kwargs,
        )

    def __repr__(self) -> str:
        return f"MAILSwarmTemplate(name={self.name!r}, agents={self.agent_names!r})"


MAILSwarm.template_type = MAILSwarmTemplate


def _add_action(
    by_name: dict[str, MAILAction], actions: list[MAILAction], act: MAILAction, swarm: str
) -> None:
    existing = by_name.get(act.name)
    if existing is not None and existing is not act:
        raise ValueError(f"duplicate action definition for '{act.name}' in swarm '{swarm}'")
    if existing is None:
        by_name[act.name] = act
        actions.append(act)
