"""The customer support swarm's `coordinator` agent: routes a customer's query to the specialists and writes the answer."""

from mail.examples.support.coordinator.agent import LiteLLMCoordinatorFunction
from mail.examples.support.coordinator.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMCoordinatorFunction"]
