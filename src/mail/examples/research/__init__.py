"""The `research` example swarm: a research assistant team.

`researcher` (the entrypoint) asks `searcher` (topic look-ups, fact extraction), `verifier`
(claim checks, confidence) and `summarizer` (summaries, bibliographies). No network is used:
search results and verdicts are synthetic and say so; text processing is real.
"""

from mail.examples.research.researcher import LiteLLMResearcherFunction
from mail.examples.research.searcher import LiteLLMSearcherFunction, extract_facts, search_topic
from mail.examples.research.summarizer import (
    LiteLLMSummarizerFunction,
    create_bibliography,
    summarize_text,
)
from mail.examples.research.verifier import (
    LiteLLMVerifierFunction,
    rate_confidence,
    verify_claim,
)

__all__ = [
    "LiteLLMResearcherFunction",
    "LiteLLMSearcherFunction",
    "LiteLLMSummarizerFunction",
    "LiteLLMVerifierFunction",
    "create_bibliography",
    "extract_facts",
    "rate_confidence",
    "search_topic",
    "summarize_text",
    "verify_claim",
]
