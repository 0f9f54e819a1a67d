"""Exceptions raised by the LiteLLM agent functions."""

from __future__ import annotations


class AgentFunctionError(RuntimeError):
    """Base class for errors raised by MAIL's LiteLLM agent functions.

    ``kind`` says what went wrong in one word, for programs: ``missing_api_key``,
    ``authentication``, ``permission``, ``unknown_model``, ``configuration``,
    ``provider_error`` (another refusal), ``provider_unavailable`` (retries used up) or
    ``malformed_tool_call``. The runtime copies it into the ``agent_error`` event.
    """

    default_kind = "provider_error"

    def __init__(self, message: str = "", *, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind or self.default_kind


class LLMConfigError(AgentFunctionError, ValueError):
    """The agent is configured in a way that cannot work (e.g. a proxy without a base URL)."""

    default_kind = "configuration"


class LLMCallError(AgentFunctionError):
    """The provider call failed (after any retries that were safe to make)."""


class MalformedToolCallError(AgentFunctionError):
    """The model produced tool-call arguments that are not a JSON object."""

    default_kind = "malformed_tool_call"

    def __init__(self, tool_name: str, raw_arguments: str, reason: str) -> None:
        self.kind = self.default_kind
        self.tool_name = tool_name
        self.raw_arguments = raw_arguments
        shown = raw_arguments if len(raw_arguments) <= 200 else raw_arguments[:200] + "..."
        super().__init__(
            f"tool call '{tool_name}' has arguments that are not a JSON object ({reason}): {shown!r}"
        )
