"""Agent functions ("factories") that plug LLMs into the MAIL runtime."""

from mail.core.agents import AgentFunction
from mail.factories.action import (
    ActionAgentFunction,
    LiteLLMActionAgentFunction,
    action_agent_factory,
)
from mail.factories.base import (
    LiteLLMAgentFunction,
    MAILAgentFunction,
    base_agent_factory,
)
from mail.factories.errors import (
    AgentFunctionError,
    LLMCallError,
    LLMConfigError,
    MalformedToolCallError,
)
from mail.factories.retry import RetryPolicy
from mail.factories.supervisor import (
    LiteLLMSupervisorFunction,
    SupervisorFunction,
    supervisor_factory,
)

__all__ = [
    "ActionAgentFunction",
    "AgentFunction",
    "AgentFunctionError",
    "LLMCallError",
    "LLMConfigError",
    "LiteLLMActionAgentFunction",
    "LiteLLMAgentFunction",
    "LiteLLMSupervisorFunction",
    "MAILAgentFunction",
    "MalformedToolCallError",
    "RetryPolicy",
    "SupervisorFunction",
    "action_agent_factory",
    "base_agent_factory",
    "supervisor_factory",
]
