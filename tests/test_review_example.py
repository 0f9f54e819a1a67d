"""The `email-review` example swarm on the offline demo model: ask, draft, feedback, edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mail import MAILSwarmTemplate
from mail.examples.email_review.actions import OUTBOX

pytestmark = pytest.mark.timeout(300)

SWARMS_JSON = Path(__file__).resolve().parents[1] / "swarms.json"


async def test_email_review_walkthrough_on_the_demo_model() -> None:
    from mail.factories._litellm import load_litellm

    load_litellm()  # before the timed requests: the import is slow on a busy machine
    OUTBOX.clear()
    template = MAILSwarmTemplate.from_swarm_json_file("email-review", SWARMS_JSON)
    swarm = template.instantiate(user_id="alice", print_llm_streams=False)
    try:

        async def step(**kwargs: object) -> tuple[str, list[dict]]:
            response, _ = await swarm.post_message(task_id="t1", timeout=180, **kwargs)  # type: ignore[arg-type]
            message = response["message"]
            held = json.loads(message["body"]) if message["subject"] == "::action_review::" else []
            return message["body"], held

        # No address in the request: the assistant asks (a respond-only action).
        _, held = await step(body="Let the team know the launch moves to Friday")
        assert [h["action"] for h in held] == ["ask_question"]
        assert held[0]["allowed_decisions"] == ["respond", "ignore"]

        # The answer comes back as the question's result; the assistant drafts.
        _, held = await step(
            resume_from="action_review",
            decisions=[
                {
                    "tool_call_id": held[0]["tool_call_id"],
                    "type": "respond",
                    "message": "team@example.com",
                }
            ],
        )
        assert [h["action"] for h in held] == ["send_email"]
        draft = held[0]["args"]
        assert draft["to"] == "team@example.com"
        assert "launch moves to Friday" in draft["body"]

        # Feedback instead of sending: a new draft with the feedback worked in.
        _, held = await step(
            resume_from="action_review",
            decisions=[
                {"tool_call_id": held[0]["tool_call_id"], "type": "respond", "message": "say 3pm"}
            ],
        )
        assert "say 3pm" in held[0]["args"]["body"]

        # The person edits the final text; that is what gets sent.
        final = {**held[0]["args"], "body": "Hello team, the launch is Friday at 3pm."}
        body, held = await step(
            resume_from="action_review",
            decisions=[{"tool_call_id": held[0]["tool_call_id"], "type": "edit", "args": final}],
        )
        assert held == []
        assert "Email sent to team@example.com" in body
        assert OUTBOX == [final]
        # memory=True: the edit is remembered for the next drafts.
        notes = await swarm.runtime.recall("assistant", "launch Friday team")
        assert any("Hello team, the launch is Friday at 3pm." in n for n in notes)
    finally:
        await swarm.shutdown()
