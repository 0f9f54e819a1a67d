"""Factory of the customer support swarm's `faq` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMFaqFunction(LiteLLMActionAgentFunction):
    """The `faq` agent: searches the FAQ with `search_faq`."""


__all__ = ["LiteLLMFaqFunction"]
