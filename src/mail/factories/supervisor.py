"""Agent functions for supervisors: agents that may call `task_complete`."""

from __future__ import annotations

from mail.core.tools import create_supervisor_tools
from mail.factories.base import (
    DelegatingAgentFunction,
    LiteLLMAgentFunction,
    MAILAgentFunction,
    deprecated_function_factory,
)


class SupervisorFunction(MAILAgentFunction):
    """Base for supervisors: action tools may be given as pydantic model classes.

    Same constructor as MAILAgentFunction, except that supervisors complete tasks by default
    (`can_complete_tasks` not given means True).
    """

    accepts_model_tools = True
    completes_tasks_by_default = True

    def add_supervisor_tools(self) -> None:
        """Append the supervisor tools to the agent's own: `send_interrupt` and
        `send_broadcast` when it has comm targets, `task_complete` always. Own tools (team_tools'
        send_broadcast) replace built-ins of the same name."""
        self.tools = [
            *self.tools,
            *create_supervisor_tools(
                self.comm_targets,
                can_complete_tasks=True,
                enable_interswarm=self.enable_interswarm,
                exclude_tools=[*self.exclude_tools, *self.own_tool_names()],
                style=self.tool_format,
                _debug_include_intraswarm=bool(self.comm_targets),
            ),
        ]


class LiteLLMSupervisorFunction(DelegatingAgentFunction, SupervisorFunction):
    """A LiteLLM supervisor: its actions plus the supervisor tools, fixed at construction.

    Tool order in each request: MAIL tools, actions, supervisor tools (`send_interrupt` and
    `send_broadcast` only when the supervisor has comm targets; `task_complete` always).
    Accepts every `LiteLLMAgentFunction` parameter; the inner function is `self.supervisor_fn`
    and receives the same settings, including `user_token`.
    """

    _inner_attr = "supervisor_fn"
    supervisor_fn: LiteLLMAgentFunction

    def _add_role_tools(self) -> None:
        self.add_supervisor_tools()


supervisor_factory = deprecated_function_factory(LiteLLMSupervisorFunction, "supervisor_factory")
