"""Exceptions raised by the LiteLLM agent functions.

The runtime turns any exception raised by an agent function into an `::agent_error::` system
message for the task, so these messages are written to be read by people (and models): they
name the agent, the model and what went wrong.
"""

from __future__ import annotations


class AgentFunctionError(RuntimeError):
    """Base class for errors raised by MAIL's LiteLLM agent functions."""


class LLMConfigError(AgentFunctionError, ValueError):
    """The agent is configured in a way that cannot work (e.g. a proxy without a base URL)."""


class LLMCallError(AgentFunctionError):
    """The provider call failed (after any retries that were safe to make)."""


class MalformedToolCallError(AgentFunctionError):
    """The model produced tool-call arguments that are not a JSON object."""

    def __init__(self, tool_name: str, raw_arguments: str, reason: str) -> None:
        self.tool_name = tool_name
        self.raw_arguments = raw_arguments
        shown = raw_arguments if len(raw_arguments) <= 200 else raw_arguments[:200] + "..."
        super().__init__(
            f"tool call '{tool_name}' has arguments that are not a JSON object ({reason}): {shown!r}"
        )
