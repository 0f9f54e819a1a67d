"""Factory of the customer support swarm's `classifier` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMClassifierFunction(LiteLLMActionAgentFunction):
    """The `classifier` agent: sorts a ticket into a category and priority with `classify_ticket`."""


__all__ = ["LiteLLMClassifierFunction"]
