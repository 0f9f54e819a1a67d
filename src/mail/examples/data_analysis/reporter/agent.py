"""Factory of the data analysis swarm's `reporter` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMReporterFunction(LiteLLMActionAgentFunction):
    """The `reporter` agent: turns findings into a Markdown report with `format_report`."""


__all__ = ["LiteLLMReporterFunction"]
