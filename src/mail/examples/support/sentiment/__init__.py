"""The customer support swarm's `sentiment` agent: reads the customer's tone (`analyze_sentiment`) and escalates (`create_escalation`)."""

from mail.examples.support.sentiment.actions import analyze_sentiment, create_escalation
from mail.examples.support.sentiment.agent import LiteLLMSentimentFunction
from mail.examples.support.sentiment.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMSentimentFunction", "analyze_sentiment", "create_escalation"]
