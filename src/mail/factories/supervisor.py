"""Agent functions for supervisors: agents that may call `task_complete`."""

from __future__ import annotations

from typing import Any

from mail.core.tools import create_supervisor_tools
from mail.factories.base import (
    FUNCTION_FACTORY_ORDER,
    DelegatingAgentFunction,
    LiteLLMAgentFunction,
    MAILAgentFunction,
    ToolFormat,
    deprecated_function_factory,
    wiring_of,
)


class SupervisorFunction(MAILAgentFunction):
    """Base for supervisors: action tools may be given as pydantic model classes.

    The same parameters as MAILAgentFunction, with `can_complete_tasks` fourth (v1.3's order);
    supervisors complete tasks by default (`can_complete_tasks` not given means True).
    """

    accepts_model_tools = True
    completes_tasks_by_default = True

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[Any],
        can_complete_tasks: bool | None = None,
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        # v1.3's positional order: `can_complete_tasks` comes right after `tools` here.
        super().__init__(**wiring_of(locals()), **kwargs)

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


supervisor_factory = deprecated_function_factory(
    LiteLLMSupervisorFunction,
    "supervisor_factory",
    {"name": "supervisor", "enable_entrypoint": True, "can_complete_tasks": True},
    # v1.3's supervisor_factory had no `_debug_include_mail_tools` parameter.
    tuple(p for p in FUNCTION_FACTORY_ORDER if p != "_debug_include_mail_tools"),
)
