"""Factory of the example analyst agent."""

from typing import Any

from mail.core.tools import AgentToolCall
from mail.examples.analyst_dummy.prompts import SYSPROMPT
from mail.examples.legacy import example_agent_params, example_factory
from mail.factories.base import LiteLLMAgentFunction


class LiteLLMAnalystFunction(LiteLLMAgentFunction):
    """The analyst: delegates to the shared LiteLLM implementation.

    Overriding `__call__` is where a custom agent would add tracing or rewrite messages.
    """

    async def __call__(
        self,
        messages: list[dict[str, Any]],
        tool_choice: str | dict[str, Any] = "required",
    ) -> tuple[str | None, list[AgentToolCall]]:
        return await super().__call__(messages, tool_choice)


# v1.3's names: default agent_params and the deprecated function-style factory.
analyst_agent_params = example_agent_params(SYSPROMPT)
factory_analyst_dummy = example_factory(LiteLLMAnalystFunction, "factory_analyst_dummy", "analyst")

__all__ = ["LiteLLMAnalystFunction", "analyst_agent_params", "factory_analyst_dummy"]
