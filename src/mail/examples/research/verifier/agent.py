"""Factory of the research assistant swarm's `verifier` agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMVerifierFunction(LiteLLMActionAgentFunction):
    """The `verifier` agent: checks claims (`verify_claim`) and weighs evidence (`rate_confidence`)."""


__all__ = ["LiteLLMVerifierFunction"]
