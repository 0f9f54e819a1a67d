"""Factory of the customer support swarm's `sentiment` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMSentimentFunction(LiteLLMActionAgentFunction):
    """The `sentiment` agent: reads the customer's tone (`analyze_sentiment`) and escalates (`create_escalation`)."""


__all__ = ["LiteLLMSentimentFunction"]
