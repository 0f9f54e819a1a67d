"""Factory of the example analyst agent."""

from collections.abc import Awaitable
from typing import Any

from mail.core.tools import AgentToolCall
from mail.factories.base import LiteLLMAgentFunction


class LiteLLMAnalystFunction(LiteLLMAgentFunction):
    """The analyst: delegates to the shared LiteLLM implementation.

    Overriding `__call__` is where a custom agent would add tracing or rewrite messages.
    """

    def __call__(
        self,
        messages: list[dict[str, Any]],
        tool_choice: str | dict[str, Any] = "required",
    ) -> Awaitable[tuple[str | None, list[AgentToolCall]]]:
        return super().__call__(messages, tool_choice)


__all__ = ["LiteLLMAnalystFunction"]
