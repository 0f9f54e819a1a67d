"""Factory of the example math agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMMathFunction(LiteLLMActionAgentFunction):
    """The math agent: a LiteLLM action agent whose action is `calculate_expression`."""


__all__ = ["LiteLLMMathFunction"]
