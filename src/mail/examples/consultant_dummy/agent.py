"""Factory of the example consultant agent."""

from mail.examples.consultant_dummy.prompts import SYSPROMPT
from mail.examples.legacy import example_agent_params, example_factory
from mail.factories.base import LiteLLMAgentFunction


class LiteLLMConsultantFunction(LiteLLMAgentFunction):
    """The consultant: a plain LiteLLM agent (no actions)."""


# v1.3's names: default agent_params and the deprecated function-style factory.
consultant_agent_params = example_agent_params(SYSPROMPT)
factory_consultant_dummy = example_factory(
    LiteLLMConsultantFunction, "factory_consultant_dummy", "consultant"
)

__all__ = ["LiteLLMConsultantFunction", "consultant_agent_params", "factory_consultant_dummy"]
