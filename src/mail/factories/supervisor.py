"""Agent functions for supervisors: agents that may call `task_complete`."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable
from typing import Any

from mail.core.tools import create_supervisor_tools
from mail.factories._settings import check_settings
from mail.factories.base import (
    AgentResult,
    DelegatingAgentFunction,
    LiteLLMAgentFunction,
    MAILAgentFunction,
    ToolChoice,
    ToolFormat,
    deprecated_function_factory,
    inner_function,
)


class SupervisorFunction(MAILAgentFunction):
    """Base for supervisors: action tools may be given as pydantic model classes.

    Same constructor as MAILAgentFunction, except that supervisors complete tasks by default.
    """

    accepts_model_tools = True

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[Any],
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = True,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            name=name,
            comm_targets=comm_targets,
            tools=tools,
            enable_entrypoint=enable_entrypoint,
            enable_interswarm=enable_interswarm,
            can_complete_tasks=can_complete_tasks,
            tool_format=tool_format,
            exclude_tools=exclude_tools,
            **kwargs,
        )

    @abstractmethod
    def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> Awaitable[AgentResult]: ...


class LiteLLMSupervisorFunction(DelegatingAgentFunction, SupervisorFunction):
    """A LiteLLM supervisor: its actions plus the supervisor tools, fixed at construction.

    Tool order in each request: MAIL tools, actions, supervisor tools (`send_interrupt` and
    `send_broadcast` only when the supervisor has comm targets; `task_complete` always).
    Accepts every `LiteLLMAgentFunction` parameter; the inner function is `self.supervisor_fn`
    and receives the same settings, including `user_token`.
    """

    _inner_attr = "supervisor_fn"

    # Template checks compare agent_params with these (see mail.api.factory_check).
    accepted_settings = LiteLLMAgentFunction.__init__

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[Any],
        llm: str,
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = True,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        **settings: Any,
    ) -> None:
        check_settings(type(self).__name__, settings, LiteLLMAgentFunction.__init__)
        super().__init__(
            name=name,
            comm_targets=comm_targets,
            tools=tools,
            enable_entrypoint=enable_entrypoint,
            enable_interswarm=enable_interswarm,
            can_complete_tasks=can_complete_tasks,
            tool_format=tool_format,
            exclude_tools=exclude_tools,
        )
        supervisor_tools = create_supervisor_tools(
            self.comm_targets,
            can_complete_tasks=True,
            enable_interswarm=enable_interswarm,
            # Own tools (team_tools' send_broadcast) replace built-ins of the same name.
            exclude_tools=[*self.exclude_tools, *_own_tool_names(self.tools)],
            style=tool_format,
            _debug_include_intraswarm=bool(self.comm_targets),
        )
        self.tools = [*self.tools, *supervisor_tools]
        self.supervisor_fn: LiteLLMAgentFunction = inner_function(self, llm, settings)
        self.print_llm_streams = self.supervisor_fn.print_llm_streams


def _own_tool_names(tools: list[Any]) -> list[str]:
    names = []
    for tool in tools:
        if isinstance(tool, dict):
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if isinstance(name, str):
                names.append(name)
    return names


supervisor_factory = deprecated_function_factory(LiteLLMSupervisorFunction, "supervisor_factory")
