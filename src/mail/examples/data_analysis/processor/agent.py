"""Factory of the data analysis swarm's `processor` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMProcessorFunction(LiteLLMActionAgentFunction):
    """The `processor` agent: makes sample datasets (`generate_sample_data`) and reads CSV (`parse_csv`)."""


__all__ = ["LiteLLMProcessorFunction"]
