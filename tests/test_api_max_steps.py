"""A request's `max_steps` (HTTP kwargs.max_steps) limits that task, with or without a
continuous loop; the swarm's task_message_limit is the default."""

from __future__ import annotations

import asyncio
from typing import Any

from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate


def _chatty_factory(**_: Any):  # noqa: ANN202
    """Two agents that keep asking each other; only a forced tool_choice makes them finish."""

    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        args: dict[str, Any]
        if isinstance(tool_choice, dict) and tool_choice.get("name") == "task_complete":
            name, args = "task_complete", {"finish_message": "stopped by the step limit"}
        else:
            name, args = "send_request", {"target": "peer", "subject": "again", "body": "more"}
        return None, [
            AgentToolCall(
                tool_name=name,
                tool_args=args,
                tool_call_id=f"c{len(history)}",
                completion={"role": "assistant", "content": None},
            )
        ]

    return agent


def _peer_factory(**_: Any):  # noqa: ANN202
    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        return None, [
            AgentToolCall(
                tool_name="send_response",
                tool_args={"target": "supervisor", "subject": "re", "body": "keep going"},
                tool_call_id=f"p{len(history)}",
                completion={"role": "assistant", "content": None},
            )
        ]

    return agent


def _template(limit: int | None) -> MAILSwarmTemplate:
    return MAILSwarmTemplate(
        name="steps",
        agents=[
            MAILAgentTemplate(
                "supervisor",
                _chatty_factory,
                ["peer"],
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            MAILAgentTemplate("peer", _peer_factory, ["supervisor"]),
        ],
        actions=[],
        entrypoint="supervisor",
        task_message_limit=limit,
    )


def _steps_taken(swarm: Any, task_id: str) -> int:
    return sum(1 for e in swarm.get_task_events(task_id) if e.event == "new_message")


async def test_request_max_steps_applies_under_a_continuous_loop() -> None:
    swarm = _template(None).instantiate({}, user_id="u")
    loop = asyncio.create_task(swarm.run_continuous())
    response, _ = await asyncio.wait_for(
        swarm.post_message(body="go", task_id="t1", max_steps=3), 10
    )
    assert response["message"]["body"] == "stopped by the step limit"
    short = _steps_taken(swarm, "t1")
    response, _ = await asyncio.wait_for(
        swarm.post_message(body="go", task_id="t2", max_steps="7"), 10
    )
    assert response["message"]["body"] == "stopped by the step limit"
    assert _steps_taken(swarm, "t2") > short
    bad, _ = await swarm.post_message(body="go", task_id="t3", max_steps="lots")
    assert bad["message"]["subject"] == "::task_error::"
    assert "max_steps must be an int or null" in bad["message"]["body"]
    await swarm.shutdown()
    await loop


async def test_template_limit_is_the_default_without_a_loop() -> None:
    swarm = _template(2).instantiate({}, user_id="u")
    response, _ = await asyncio.wait_for(swarm.post_message(body="go", task_id="t1"), 10)
    assert response["message"]["body"] == "stopped by the step limit"
    await swarm.shutdown()
