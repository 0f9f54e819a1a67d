"""One swarm run by one `asyncio.run` after another (a script calling the v1.3 API in steps)."""

from __future__ import annotations

import asyncio
from typing import Any

from support.one_agent_swarm import FINISH, one_agent_swarm


def _swarm() -> Any:
    async def agent(history: Any, tool_choice: Any) -> Any:
        if "hang" in str(history[-1]):
            await asyncio.Event().wait()
        await asyncio.sleep(0.01)
        return None, [FINISH]

    return one_agent_swarm("loops", agent)


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
