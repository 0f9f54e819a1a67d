"""Agent functions for agents that have actions (custom tools) but cannot complete tasks."""

from __future__ import annotations

from mail.factories.base import (
    FUNCTION_FACTORY_ORDER,
    DelegatingAgentFunction,
    LiteLLMAgentFunction,
    MAILAgentFunction,
    deprecated_function_factory,
)


class ActionAgentFunction(MAILAgentFunction):
    """Base for agents with actions: action tools may be given as pydantic model classes."""

    accepts_model_tools = True


class LiteLLMActionAgentFunction(DelegatingAgentFunction, ActionAgentFunction):
    """A LiteLLM agent whose tools are its actions (plus the MAIL tools added per call).

    Accepts every `LiteLLMAgentFunction` parameter. An agent with no actions is allowed.
    The work is done by `self.action_agent_fn` (the runtime and the swarm's system-prompt
    augmentation reach it through that attribute).
    """

    _inner_attr = "action_agent_fn"
    action_agent_fn: LiteLLMAgentFunction


action_agent_factory = deprecated_function_factory(
    LiteLLMActionAgentFunction,
    "action_agent_factory",
    {"name": "action"},
    # v1.3's order ended with `_debug_include_mail_tools`, `print_llm_streams`.
    (*FUNCTION_FACTORY_ORDER[:16], "_debug_include_mail_tools", "print_llm_streams"),
)
