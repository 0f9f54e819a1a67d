"""Agent functions for supervisors: agents that may call `task_complete`."""

from __future__ import annotations

import warnings
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from mail.core.tools import create_supervisor_tools
from mail.factories._settings import check_settings
from mail.factories.base import (
    AgentResult,
    LiteLLMAgentFunction,
    MAILAgentFunction,
    ToolChoice,
    ToolFormat,
    normalize_tools,
)


class SupervisorFunction(MAILAgentFunction):
    """Base for supervisors: action tools may be given as pydantic model classes."""

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[Any],
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = True,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            name=name,
            comm_targets=comm_targets,
            tools=normalize_tools(tools, tool_format),
            enable_entrypoint=enable_entrypoint,
            enable_interswarm=enable_interswarm,
            can_complete_tasks=can_complete_tasks,
            tool_format=tool_format,
            exclude_tools=exclude_tools,
            **kwargs,
        )

    @abstractmethod
    def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> Awaitable[AgentResult]: ...


class LiteLLMSupervisorFunction(SupervisorFunction):
    """A LiteLLM supervisor: its actions plus the supervisor tools, fixed at construction.

    Tool order in each request: MAIL tools, actions, supervisor tools (`send_interrupt` and
    `send_broadcast` only when the supervisor has comm targets; `task_complete` always).
    Accepts every `LiteLLMAgentFunction` parameter; the inner function is `self.supervisor_fn`
    and receives the same settings, including `user_token`.
    """

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[Any],
        llm: str,
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = True,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        **settings: Any,
    ) -> None:
        check_settings(type(self).__name__, settings, LiteLLMAgentFunction.__init__)
        super().__init__(
            name=name,
            comm_targets=comm_targets,
            tools=tools,
            enable_entrypoint=enable_entrypoint,
            enable_interswarm=enable_interswarm,
            can_complete_tasks=can_complete_tasks,
            tool_format=tool_format,
            exclude_tools=exclude_tools,
        )
        supervisor_tools = create_supervisor_tools(
            self.comm_targets,
            can_complete_tasks=True,
            enable_interswarm=enable_interswarm,
            exclude_tools=self.exclude_tools,
            style=tool_format,
            _debug_include_intraswarm=bool(self.comm_targets),
        )
        self.tools = [*self.tools, *supervisor_tools]
        self.supervisor_fn = LiteLLMAgentFunction(
            name=name,
            comm_targets=comm_targets,
            tools=self.tools,
            llm=llm,
            enable_entrypoint=enable_entrypoint,
            enable_interswarm=enable_interswarm,
            can_complete_tasks=can_complete_tasks,
            tool_format=tool_format,
            exclude_tools=exclude_tools,
            **settings,
        )
        self.print_llm_streams = self.supervisor_fn.print_llm_streams

    @property
    def llm(self) -> str:
        return self.supervisor_fn.llm

    @property
    def system(self) -> str:
        return self.supervisor_fn.system

    @system.setter
    def system(self, value: str) -> None:
        self.supervisor_fn.system = value

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> AgentResult:
        return await self.supervisor_fn(messages, tool_choice)


def supervisor_factory(**kwargs: Any) -> Callable[..., Awaitable[AgentResult]]:
    """Deprecated: build a `LiteLLMSupervisorFunction` and return a coroutine function."""
    warnings.warn(
        "supervisor_factory is deprecated; use LiteLLMSupervisorFunction as the factory",
        DeprecationWarning,
        stacklevel=2,
    )
    agent = LiteLLMSupervisorFunction(**kwargs)

    async def run(
        messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> AgentResult:
        return await agent(messages, tool_choice)

    run._mail_agent = agent  # type: ignore[attr-defined]
    return run
