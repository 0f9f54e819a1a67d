"""A small swarm written the way v1.3's documentation writes one (tests/test_original_api*.py).

The factories return async functions ``(history, tool_choice) -> (text, [AgentToolCall])``
and are called with keyword arguments, as the original documents.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from mail import AgentToolCall, MAILAction, MAILAgentTemplate, MAILSwarm, MAILSwarmTemplate

# A factory as the original documents it: called with keyword arguments, it returns an async
# function (history, tool_choice) -> (text, [AgentToolCall]).


def finishing_factory(**kwargs: Any) -> Any:
    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required") -> Any:
        call = AgentToolCall(
            tool_name="task_complete",
            tool_args={"finish_message": "all done"},
            tool_call_id="call-1",
            completion={"role": "assistant", "content": "finishing"},
        )
        return None, [call]

    return agent


def anthropic_breakpoint_factory(**kwargs: Any) -> Any:
    """An agent answering with Anthropic's layout: the call is a ``tool_use`` content block."""

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required") -> Any:
        block = {
            "type": "tool_use",
            "id": "toolu_01Compat",
            "name": "human_review",
            "input": {"question": "ship it?"},
        }
        call = AgentToolCall(
            tool_name="human_review",
            tool_args={"question": "ship it?"},
            tool_call_id="toolu_01Compat",
            completion={"role": "assistant", "content": [block]},
        )
        return None, [call]

    return agent


def responses_breakpoint_factory(**kwargs: Any) -> Any:
    """An agent answering with the Responses layout: the call is a ``function_call`` item."""

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required") -> Any:
        item = {
            "type": "function_call",
            "id": "fc_item7",
            "call_id": "call_item7",
            "name": "human_review",
            "arguments": '{"question": "ship it?"}',
            "status": "completed",
        }
        call = AgentToolCall(
            tool_name="human_review",
            tool_args={"question": "ship it?"},
            tool_call_id="call_item7",
            responses=[item],
        )
        return None, [call]

    return agent


async def review(args: dict[str, Any]) -> str:
    return "reviewed"


HUMAN_REVIEW = MAILAction(
    name="human_review",
    description="Ask a person.",
    parameters={"type": "object", "properties": {"question": {"type": "string"}}},
    function=review,
)


def template(factory: Any = finishing_factory, **kwargs: Any) -> MAILSwarmTemplate:
    return MAILSwarmTemplate(
        name="compat",
        version="1.3.6",
        agents=[
            MAILAgentTemplate(
                name="supervisor",
                factory=factory,
                comm_targets=["helper"],
                actions=kwargs.pop("supervisor_actions", []),
                agent_params={},
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            MAILAgentTemplate(
                name="helper",
                factory=finishing_factory,
                comm_targets=["supervisor"],
                actions=[],
                agent_params={},
            ),
        ],
        actions=kwargs.pop("actions", []),
        entrypoint="supervisor",
        **kwargs,
    )


def runtime_for(swarm: MAILSwarm) -> Any:
    """A MAILRuntime built directly, as api.md describes (AgentCore objects by name)."""
    from mail import MAILRuntime

    return MAILRuntime(
        agents={agent.name: agent.to_core() for agent in swarm.agents},
        actions={action.name: action.to_core() for action in swarm.actions},
        user_id="u-compat",
        user_role="user",
        swarm_name="compat",
        entrypoint="supervisor",
    )


async def until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def swarms_document() -> list[dict[str, Any]]:
    return [
        {
            "name": "compat",
            "version": "1.3.6",
            "entrypoint": "supervisor",
            "agents": [
                {
                    "name": "supervisor",
                    "factory": "python::mail.factories.supervisor:supervisor_factory",
                    "comm_targets": ["helper"],
                    "agent_params": {"llm": "mail/demo"},
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "actions": ["lookup"],
                },
                {
                    "name": "helper",
                    "factory": "python::mail.factories.base:base_agent_factory",
                    "comm_targets": ["supervisor"],
                    "agent_params": {"llm": "mail/demo"},
                },
            ],
            "actions": [
                {
                    "name": "lookup",
                    "description": "Look something up.",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                    "function": "python::support.scripted_agents:echo_action",
                }
            ],
        }
    ]
