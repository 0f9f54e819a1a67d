"""Agent functions on the official OpenAI SDK (Chat Completions and Responses)."""

from mail.stdlib.openai.agents import (
    OpenAIChatCompletionsAgentFunction,
    OpenAIChatCompletionsSupervisorFunction,
    OpenAIResponsesAgentFunction,
    OpenAIResponsesSupervisorFunction,
)

__all__ = [
    "OpenAIChatCompletionsAgentFunction",
    "OpenAIChatCompletionsSupervisorFunction",
    "OpenAIResponsesAgentFunction",
    "OpenAIResponsesSupervisorFunction",
]
