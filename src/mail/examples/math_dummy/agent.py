"""Factory of the example math agent."""

from mail.examples.legacy import example_agent_params, example_factory
from mail.examples.math_dummy.prompts import SYSPROMPT
from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMMathFunction(LiteLLMActionAgentFunction):
    """The math agent: a LiteLLM action agent whose action is `calculate_expression`."""


# v1.3's names: default agent_params and the deprecated function-style factory.
math_agent_params = example_agent_params(SYSPROMPT)
factory_math_dummy = example_factory(LiteLLMMathFunction, "factory_math_dummy", "math")

__all__ = ["LiteLLMMathFunction", "factory_math_dummy", "math_agent_params"]
