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
