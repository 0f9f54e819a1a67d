"""The customer support swarm's `classifier` agent: sorts a ticket into a category and priority with `classify_ticket`."""

from mail.examples.support.classifier.actions import classify_ticket
from mail.examples.support.classifier.agent import LiteLLMClassifierFunction
from mail.examples.support.classifier.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMClassifierFunction", "classify_ticket"]
