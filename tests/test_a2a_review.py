"""An action review round trip through A2A `input-required`, on LiteLLM agents answered by the
scripted OpenAI-compatible LLM, over real HTTP with the A2A SDK's client."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts
from a2a.types.a2a_pb2 import TaskState

from mail.factories import LiteLLMAgentFunction, RetryPolicy
from server_fixtures import create_key
from support.a2a_clients import a2a_client, collect, message
from support.review_swarm import review_swarms_json, serve_swarm
from support.scripted_llm import ScriptedLLM, reply, tool_call

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        LiteLLMAgentFunction, "retry_policy", RetryPolicy(max_attempts=1, base_delay=0.01)
    )


async def test_review_pause_is_input_required_and_decisions_resume(tmp_path: Path) -> None:
    from mail.factories._litellm import load_litellm

    load_litellm()
    async with ScriptedLLM() as llm:
        swarm = review_swarms_json(f"review-{uuid.uuid4().hex[:6]}", llm.base_url)
        key = create_key(tmp_path / "keys.json", "user", "alice")
        async with (
            serve_swarm(tmp_path, swarm) as url,
            a2a_client(url, key, streaming=False) as client,
        ):
            llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "Hi Bob"}, "a1"))
            events = await collect(client, message("email bob"))
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            (pause,) = get_data_parts(task.status.message.parts)
            assert pause["mail_pause"] == "action_review"
            assert pause["answer_with"] == "decisions"
            (held,) = pause["held"]
            assert held["tool_call_id"] == "a1" and held["action"] == "send_email"
            assert held["args"] == {"to": "bob@x.org", "body": "Hi Bob"}

            llm.queue(reply(tool_call("task_complete", {"finish_message": "sent it"})))
            decision = {"decisions": [{"tool_call_id": "a1", "type": "accept"}]}
            events = await collect(
                client, message(data=decision, task_id=task.id, context_id=task.context_id)
            )
            done = events[-1].task
            assert done.id == task.id
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert get_artifact_text(done.artifacts[-1]) == "sent it"
            # The accepted call really ran, with the agent's arguments.
            results = {
                m.get("tool_call_id"): m.get("content")
                for m in llm.requests[-1].messages
                if m.get("role") == "tool"
            }
            assert results["a1"] == "SUCCESS: echo: " + json.dumps(
                {"body": "Hi Bob", "to": "bob@x.org"}, sort_keys=True
            )
