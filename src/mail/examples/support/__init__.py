"""The `support` example swarm: a customer support team.

`coordinator` (the entrypoint) hands a customer's message to `faq` (help-centre answers),
`classifier` (category and priority) and `sentiment` (tone, escalation), then answers. The
actions work offline on small built-in data; the root swarms.json of v1.3 names these paths.
"""

from mail.examples.support.classifier import LiteLLMClassifierFunction, classify_ticket
from mail.examples.support.coordinator import LiteLLMCoordinatorFunction
from mail.examples.support.faq import LiteLLMFaqFunction, search_faq
from mail.examples.support.sentiment import (
    LiteLLMSentimentFunction,
    analyze_sentiment,
    create_escalation,
)

__all__ = [
    "LiteLLMClassifierFunction",
    "LiteLLMCoordinatorFunction",
    "LiteLLMFaqFunction",
    "LiteLLMSentimentFunction",
    "analyze_sentiment",
    "classify_ticket",
    "create_escalation",
    "search_faq",
]
