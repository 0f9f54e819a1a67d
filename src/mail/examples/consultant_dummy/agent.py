"""Factory of the example consultant agent."""

from mail.factories.base import LiteLLMAgentFunction


class LiteLLMConsultantFunction(LiteLLMAgentFunction):
    """The consultant: a plain LiteLLM agent (no actions)."""


__all__ = ["LiteLLMConsultantFunction"]
