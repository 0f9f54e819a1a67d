"""The customer support swarm's `faq` agent: searches the FAQ with `search_faq`."""

from mail.examples.support.faq.actions import search_faq
from mail.examples.support.faq.agent import LiteLLMFaqFunction
from mail.examples.support.faq.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMFaqFunction", "search_faq"]
