"""Agent functions for agents that have actions (custom tools) but cannot complete tasks."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable
from typing import Any

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


class ActionAgentFunction(MAILAgentFunction):
    """Base for agents with actions: action tools may be given as pydantic model classes."""

    accepts_model_tools = True

    @abstractmethod
    def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> Awaitable[AgentResult]: ...


class LiteLLMActionAgentFunction(DelegatingAgentFunction, ActionAgentFunction):
    """A LiteLLM agent whose tools are its actions (plus the MAIL tools added per call).

    Accepts every `LiteLLMAgentFunction` parameter. An agent with no actions is allowed.
    The work is done by `self.action_agent_fn` (the runtime and the swarm's system-prompt
    augmentation reach it through that attribute).
    """

    _inner_attr = "action_agent_fn"

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
        can_complete_tasks: bool = False,
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
        self.action_agent_fn: LiteLLMAgentFunction = inner_function(self, llm, settings)
        self.print_llm_streams = self.action_agent_fn.print_llm_streams


action_agent_factory = deprecated_function_factory(
    LiteLLMActionAgentFunction, "action_agent_factory"
)
