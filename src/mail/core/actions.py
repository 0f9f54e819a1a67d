"""ActionCore: how the runtime executes a custom tool (an action)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from mail.core.tools import AgentToolCall

ActionFunction = Callable[[dict[str, Any]], Awaitable[str] | str]
ActionOverrideFunction = Callable[[AgentToolCall], Awaitable[str | dict[str, Any]]]
ActionResult = tuple[str, dict[str, Any]]  # ("success" | "error", {"content": str})

_step_id: ContextVar[str | None] = ContextVar("mail_action_step_id", default=None)


def current_step_id() -> str | None:
    """The id of the action call running now, ``"<task_id>:<tool_call_id>"`` (None outside
    an action): an action with outside effects can use it to do them once. A call re-run
    after a crash gets the same id once the model's answer that made it was stored."""
    return _step_id.get()


@contextmanager
def running_step(task_id: str, tool_call_id: str) -> Iterator[None]:
    token = _step_id.set(f"{task_id}:{tool_call_id}")
    try:
        yield
    finally:
        _step_id.reset(token)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass
class ActionCore:
    function: ActionFunction
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)

    async def execute(
        self,
        call: AgentToolCall,
        actions: dict[str, ActionCore] | None = None,
        action_override: ActionOverrideFunction | None = None,
    ) -> ActionResult:
        """Run the action; an exception becomes an error result, never escapes."""
        target = self
        if actions and call.tool_name in actions:
            target = actions[call.tool_name]
        if action_override is not None:
            try:
                result = await _maybe_await(action_override(call))
            except Exception as exc:  # noqa: BLE001 - reported to the agent
                return "error", {"content": f"failed to execute action override tool: {exc}"}
            if isinstance(result, dict):
                return "success", result
            return "success", {"content": str(result)}
        try:
            content = await _maybe_await(target.function(call.tool_args))
        except Exception as exc:  # noqa: BLE001 - reported to the agent
            return "error", {"content": f"failed to execute action tool: {exc}"}
        return "success", {"content": content if isinstance(content, str) else str(content)}
