"""Example consultant agent (no actions): gives recommendations."""

from mail.examples.consultant_dummy.agent import (
    LiteLLMConsultantFunction,
    consultant_agent_params,
    factory_consultant_dummy,
)
from mail.examples.consultant_dummy.prompts import SYSPROMPT as CONSULTANT_SYSPROMPT

__all__ = [
    "CONSULTANT_SYSPROMPT",
    "LiteLLMConsultantFunction",
    "consultant_agent_params",
    "factory_consultant_dummy",
]
