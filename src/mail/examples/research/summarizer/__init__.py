"""The research assistant swarm's `summarizer` agent: condenses text (`summarize_text`) and lists sources (`create_bibliography`)."""

from mail.examples.research.summarizer.actions import create_bibliography, summarize_text
from mail.examples.research.summarizer.agent import LiteLLMSummarizerFunction
from mail.examples.research.summarizer.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMSummarizerFunction", "create_bibliography", "summarize_text"]
