"""Agents with memory=True see what they acknowledged: a later request's system prompt
carries the matching notes (LiteLLM agent function against the scripted provider)."""

from __future__ import annotations

import asyncio

import pytest

from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.core.message import (
    create_agent_address,
    create_user_address,
    make_broadcast,
    make_message,
)
from mail.factories import LiteLLMAgentFunction, RetryPolicy
from support.scripted_llm import ScriptedLLM, tool_call

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        LiteLLMAgentFunction, "retry_policy", RetryPolicy(base_delay=0.01, max_delay=0.02)
    )


def _template(llm: ScriptedLLM, memory: bool) -> MAILSwarmTemplate:
    agent = MAILAgentTemplate(
        name="keeper",
        factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
        comm_targets=[],
        agent_params={
            "llm": "openai/gpt-4o-mini",
            "use_proxy": False,
            "api_base": llm.base_url,
            "api_key": "test-key",
            "system": "You are keeper.",
            "memory": memory,
        },
        enable_entrypoint=True,
        can_complete_tasks=True,
        tool_format="completions",
    )
    return MAILSwarmTemplate(name="mem", agents=[agent], actions=[], entrypoint="keeper")


@pytest.mark.parametrize("memory", [True, False])
async def test_acknowledged_broadcast_is_recalled_in_a_later_request(memory: bool) -> None:
    async with ScriptedLLM() as llm:
        swarm = _template(llm, memory).instantiate({}, user_id="u")
        loop = asyncio.create_task(swarm.run_continuous())
        llm.queue(tool_call("acknowledge_broadcast", {"note": "the code opens the vault"}))
        swarm.runtime.submit(
            make_message(
                make_broadcast(
                    "t-news",
                    create_user_address("u"),
                    [create_agent_address("keeper")],
                    "FYI",
                    "The launch code is zebra-42.",
                ),
                "broadcast",
            )
        )
        await swarm.await_queue_empty()
        llm.queue(tool_call("task_complete", {"finish_message": "zebra-42"}))
        response, _ = await swarm.post_message(body="What is the launch code?", task_id="t-ask")
        assert response["message"]["body"] == "zebra-42"
        system = llm.requests[-1].system_text
        assert system.startswith("You are keeper.")
        if memory:
            assert "Notes from your memory" in system
            assert "The launch code is zebra-42." in system and "the code opens the vault" in system
        else:
            assert "Notes from your memory" not in system
        # The runtime's own history is not changed by the recalled notes.
        history = swarm.runtime.agent_histories["t-ask::keeper"]
        assert all("Notes from your memory" not in str(h.get("content")) for h in history)
        await swarm.shutdown()
        await loop
