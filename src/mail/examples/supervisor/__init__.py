"""Example supervisor: the entrypoint that delegates to workers and completes tasks."""

from mail.examples.supervisor.agent import supervisor_agent_params
from mail.examples.supervisor.prompts import SYSPROMPT as SUPERVISOR_SYSPROMPT

__all__ = ["SUPERVISOR_SYSPROMPT", "supervisor_agent_params"]
