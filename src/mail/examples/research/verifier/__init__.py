"""The research assistant swarm's `verifier` agent: checks claims (`verify_claim`) and weighs evidence (`rate_confidence`)."""

from mail.examples.research.verifier.actions import rate_confidence, verify_claim
from mail.examples.research.verifier.agent import LiteLLMVerifierFunction
from mail.examples.research.verifier.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMVerifierFunction", "rate_confidence", "verify_claim"]
