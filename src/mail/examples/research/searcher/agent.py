"""Factory of the research assistant swarm's `searcher` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMSearcherFunction(LiteLLMActionAgentFunction):
    """The `searcher` agent: looks topics up (`search_topic`) and pulls facts out of text (`extract_facts`)."""


__all__ = ["LiteLLMSearcherFunction"]
