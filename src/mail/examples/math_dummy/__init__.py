"""Example math agent with a safe `calculate_expression` action."""

from mail.examples.math_dummy.actions import calculate_expression
from mail.examples.math_dummy.agent import (
    LiteLLMMathFunction,
    factory_math_dummy,
    math_agent_params,
)
from mail.examples.math_dummy.prompts import SYSPROMPT as MATH_SYSPROMPT
from mail.examples.math_dummy.types import action_calculate_expression

__all__ = [
    "MATH_SYSPROMPT",
    "LiteLLMMathFunction",
    "action_calculate_expression",
    "calculate_expression",
    "factory_math_dummy",
    "math_agent_params",
]
