"""Factory of the example analyst agent."""

from typing import Any

from mail.core.tools import AgentToolCall
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


__all__ = ["LiteLLMAnalystFunction"]
