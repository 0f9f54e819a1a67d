"""Factory of the data analysis swarm's `statistics` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMStatisticsFunction(LiteLLMActionAgentFunction):
    """The `statistics` agent: computes descriptive statistics (`calculate_statistics`) and correlations (`run_correlation`)."""


__all__ = ["LiteLLMStatisticsFunction"]
