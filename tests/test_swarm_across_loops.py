"""One swarm run by one `asyncio.run` after another (a script calling the v1.3 API in steps)."""

from __future__ import annotations

import asyncio
from typing import Any

from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate


def _swarm() -> Any:
    finish = AgentToolCall(
        tool_name="task_complete",
        tool_args={"finish_message": "done"},
        tool_call_id="c",
        completion={"role": "assistant", "content": None},
    )

    def factory(**_: Any) -> Any:
        async def agent(history: Any, tool_choice: Any) -> Any:
            if "hang" in str(history[-1]):
                await asyncio.Event().wait()
            await asyncio.sleep(0.01)
            return None, [finish]

        return agent

    template = MAILSwarmTemplate(
        name="loops",
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


def test_one_swarm_answers_in_one_event_loop_after_another() -> None:
    swarm = _swarm()

    async def ask() -> list[str]:
        answers = await asyncio.gather(
            swarm.post_message("go", timeout=20),
            swarm.post_message("go", timeout=20),
            swarm.post_message("hang", timeout=0.2),
        )
        return [answer[0]["message"]["subject"] for answer in answers]

    for _ in range(3):  # the mailbox's wait was bound to the first loop: the second raised
        assert asyncio.run(ask()) == ["::task_complete::", "::task_complete::", "::task_timeout::"]
