"""A task paused for action review survives kill -9 of a real `mail server`, on SQLite (the
default) and on the real PostgreSQL (DATABASE_URL): after the restart /tasks lists it with its pending reviews, and the
resume works (the edited call reaches the model)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from tests.support.store_backends import DurableStore, durable_store  # noqa: F401 - fixture
from tests.test_persistence_e2e import database  # noqa: F401 - the fixture

from server_fixtures import auth, healthy
from support.review_server import ReviewRestarts
from support.scripted_llm import ScriptedLLM, reply, tool_call

# Two server start-ups and LiteLLM imports in subprocesses: slow on a busy machine.
pytestmark = pytest.mark.timeout(900)


async def test_kill_while_waiting_for_review_restart_and_resume(
    tmp_path: Path,
    durable_store: DurableStore,  # noqa: F811
) -> None:
    task_id = str(uuid.uuid4())
    async with ScriptedLLM() as llm:
        setup = ReviewRestarts(tmp_path, llm.base_url, durable_store.env, "responses")
        key, server = setup.key, setup.server

        first = server().start(wait=False)
        try:
            await healthy(first)
            llm.queue(
                tool_call("lookup", {"query": "address"}, "l1"),
                tool_call("send_email", {"to": "bob@x.org", "body": "draft"}, "k1"),
            )
            async with httpx.AsyncClient(base_url=first.base_url, timeout=240) as client:
                r = await client.post(
                    "/message", json={"body": "email bob", "task_id": task_id}, headers=auth(key)
                )
            assert r.status_code == 200, r.text
            assert [h["tool_call_id"] for h in json.loads(r.json()["response"])] == ["k1"]
        finally:
            assert first.proc is not None
            first.proc.kill()  # kill -9: no shutdown hooks run
            first.proc.wait(10)

        second = server().start(wait=False)
        try:
            await healthy(second)
            async with httpx.AsyncClient(base_url=second.base_url, timeout=240) as client:
                tasks = (await client.get("/tasks", headers=auth(key))).json()
                record = tasks[task_id]
                assert record["is_running"] is False
                assert [p["tool_call_id"] for p in record["pending_reviews"]] == ["k1"]
                assert record["pending_reviews"][0]["args"] == {"to": "bob@x.org", "body": "draft"}

                llm.queue(
                    reply(tool_call("task_complete", {"finish_message": "sent after restart"}))
                )
                edited = {"to": "bob@x.org", "body": "final"}
                r = await client.post(
                    "/message",
                    json={
                        "task_id": task_id,
                        "resume_from": "action_review",
                        "kwargs": {
                            "decisions": [{"tool_call_id": "k1", "type": "edit", "args": edited}]
                        },
                    },
                    headers=auth(key),
                )
                assert r.status_code == 200, r.text
                assert r.json()["response"] == "sent after restart"
                # The model saw the pre-crash lookup result and the edited call after it.
                nxt = llm.requests[-1]
                items = nxt.messages
                calls = {i["call_id"]: i for i in items if i.get("type") == "function_call"}
                outputs = {
                    i["call_id"]: i["output"]
                    for i in items
                    if i.get("type") == "function_call_output"
                }
                assert json.loads(calls["k1"]["arguments"]) == edited
                assert outputs["k1"].startswith("SUCCESS: echo:") and "final" in outputs["k1"]
                assert outputs["l1"].startswith("SUCCESS: echo:")
                task = (
                    await client.get("/task", params={"task_id": task_id}, headers=auth(key))
                ).json()
                names = [e["event"] for e in task["events"]]
                assert names.index("action_review") < names.index("action_review_decision")
                assert task["pending_reviews"] == []
        finally:
            assert second.stop(timeout=120) == 0, second.logs()
