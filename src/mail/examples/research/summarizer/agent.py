"""Factory of the research assistant swarm's `summarizer` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMSummarizerFunction(LiteLLMActionAgentFunction):
    """The `summarizer` agent: condenses text (`summarize_text`) and lists sources (`create_bibliography`)."""


__all__ = ["LiteLLMSummarizerFunction"]
