"""The agent contract: what the runtime calls and what it expects back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mail.core.tools import AgentToolCall

AgentOutput = tuple[str | None, list[AgentToolCall]]
AgentFunction = Callable[[list[dict[str, Any]], Any], Awaitable[AgentOutput]]


@dataclass
class AgentCore:
    """An agent as the runtime sees it: a function plus its wiring."""

    function: AgentFunction
    comm_targets: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    enable_entrypoint: bool = False
    enable_interswarm: bool = False
    can_complete_tasks: bool = False
    tool_format: Literal["completions", "responses"] = "responses"
    team_tools: tuple[str, ...] = ()  # opted-in team tool groups (mail.core.team)
    exclude_tools: tuple[str, ...] = ()  # MAIL tools not offered to this agent

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: Any = "required"
    ) -> AgentOutput:
        return await self.function(messages, tool_choice)

    def can_access_action(self, action_name: str) -> bool:
        """Whether `action_name` is one of this agent's actions."""
        return action_name in self.actions

    def can_access_action_or_tool(self, name: str) -> bool:
        """Whether this agent may call `name`: a messaging MAIL tool, `task_complete` when it
        can complete tasks, or one of its actions (the runtime's own check is
        mail.core.tool_rights, which also knows the tools its function was offered)."""
        if name in _EVERY_AGENTS_TOOLS:
            return True
        if name == "task_complete":
            return self.can_complete_tasks
        return name in self.actions


# What v1.3's AgentCore.can_access_action_or_tool allowed every agent.
_EVERY_AGENTS_TOOLS = frozenset(
    {
        "send_request",
        "send_response",
        "send_interrupt",
        "send_broadcast",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "help",
    }
)
