"""A swarm of one supervisor whose every turn is a test's own coroutine: for runtime tests
that only need a caller, a mailbox and an answer (timeouts, event loops, bursts)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate

# The supervisor's call that completes its task ("done").
FINISH = AgentToolCall(
    tool_name="task_complete",
    tool_args={"finish_message": "done"},
    tool_call_id="c",
    completion={"role": "assistant", "content": None},
)


def one_agent_swarm(name: str, turn: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    """An instance (user "u") of a swarm whose supervisor answers each turn with
    `await turn(history, tool_choice)`."""

    def factory(**_: Any) -> Any:
        return turn

    template = MAILSwarmTemplate(
        name=name,
        version="1.0.0",
        agents=[
            MAILAgentTemplate(
                "supervisor", factory, [], enable_entrypoint=True, can_complete_tasks=True
            )
        ],
        actions=[],
        entrypoint="supervisor",
    )
    return template.instantiate({}, user_id="u")
