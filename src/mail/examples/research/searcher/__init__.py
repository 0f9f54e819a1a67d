"""The research assistant swarm's `searcher` agent: looks topics up (`search_topic`) and pulls facts out of text (`extract_facts`)."""

from mail.examples.research.searcher.actions import extract_facts, search_topic
from mail.examples.research.searcher.agent import LiteLLMSearcherFunction
from mail.examples.research.searcher.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMSearcherFunction", "extract_facts", "search_topic"]
