"""The research assistant swarm's `researcher` agent: breaks a question down, asks the specialists and writes the answer."""

from mail.examples.research.researcher.agent import LiteLLMResearcherFunction
from mail.examples.research.researcher.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMResearcherFunction"]
