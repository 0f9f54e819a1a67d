"""Factory of the example supervisor (the stock LiteLLM supervisor)."""

from mail.examples.legacy import example_agent_params
from mail.examples.supervisor.prompts import SYSPROMPT
from mail.factories.supervisor import LiteLLMSupervisorFunction

factory = LiteLLMSupervisorFunction

# v1.3's name: the supervisor's default agent_params.
supervisor_agent_params = example_agent_params(SYSPROMPT)

__all__ = ["LiteLLMSupervisorFunction", "factory", "supervisor_agent_params"]
