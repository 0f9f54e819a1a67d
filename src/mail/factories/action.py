"""Agent functions for agents that have actions (custom tools) but cannot complete tasks."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable
from typing import Any

from mail.factories.base import (
    AgentResult,
    DelegatingAgentFunction,
    LiteLLMAgentFunction,
    MAILAgentFunction,
    ToolChoice,
    deprecated_function_factory,
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
    action_agent_fn: LiteLLMAgentFunction


action_agent_factory = deprecated_function_factory(
    LiteLLMActionAgentFunction, "action_agent_factory"
)
