"""Example analyst agent (no actions): analyses data and trends."""

from mail.examples.analyst_dummy.agent import (
    LiteLLMAnalystFunction,
    analyst_agent_params,
    factory_analyst_dummy,
)
from mail.examples.analyst_dummy.prompts import SYSPROMPT as ANALYST_SYSPROMPT

__all__ = [
    "ANALYST_SYSPROMPT",
    "LiteLLMAnalystFunction",
    "analyst_agent_params",
    "factory_analyst_dummy",
]
