"""A model's tool call arguments are read by the stdlib (`parse_arguments`): an integer
beyond 64 bits and NaN are accepted, and a call waiting for action review lands in the task
record's metadata (`pending_reviews`), which SQLite merges into the stored record with
`mail_merge` (PostgreSQL with `||`). On a real `mail server`, SQLite (the default) and
PostgreSQL: the paused task's record is stored with the call's arguments exact (the big
integer not turned into a float, NaN as null), and the store goes on writing (on SQLite a
merge error was retried as an outage for ever; PostgreSQL refused the stdlib's NaN and the
record was dropped), so after kill -9 the restarted server lists the second review and a
later task.
"""

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

pytestmark = pytest.mark.timeout(900)

BIG = 2**70 + 1
ODD_ARGS = '{"to": "bob@x.org", "body": "pay", "amount": ' + str(BIG) + ', "ratio": NaN}'


async def test_review_args_with_a_big_int_and_nan_are_stored_exactly(
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
            # First pause: plain arguments, stored (the record's row exists from here on).
            llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "draft"}, "k1"))
            async with httpx.AsyncClient(base_url=first.base_url, timeout=240) as client:
                r = await client.post(
                    "/message", json={"body": "email bob", "task_id": task_id}, headers=auth(key)
                )
                assert r.status_code == 200, r.text
                # Second pause: the odd arguments, merged into the stored record.
                llm.queue(reply(tool_call("send_email", ODD_ARGS, "k2")))
                r = await client.post(
                    "/message",
                    json={
                        "task_id": task_id,
                        "resume_from": "action_review",
                        "kwargs": {"decisions": [{"tool_call_id": "k1", "type": "accept"}]},
                    },
                    headers=auth(key),
                )
                assert r.status_code == 200, r.text
                assert [h["tool_call_id"] for h in json.loads(r.json()["response"])] == ["k2"]
                # A later task of the same server (the store still writes).
                later = str(uuid.uuid4())
                llm.queue(reply(tool_call("task_complete", {"finish_message": "later"})))
                r = await client.post(
                    "/message", json={"body": "later", "task_id": later}, headers=auth(key)
                )
                assert r.status_code == 200, r.text
                assert r.json()["response"] == "later"
        finally:
            assert first.proc is not None
            first.proc.kill()  # kill -9: what the caller was told must be stored
            first.proc.wait(10)

        second = server().start(wait=False)
        try:
            await healthy(second)
            async with httpx.AsyncClient(base_url=second.base_url, timeout=240) as client:
                tasks = (await client.get("/tasks", headers=auth(key))).json()
            assert later in tasks and tasks[later]["completed"] is True
            pending = tasks[task_id]["pending_reviews"]
            assert [p["tool_call_id"] for p in pending] == ["k2"], pending
            amount = pending[0]["args"]["amount"]
            assert type(amount) is int and amount == BIG, amount
            assert pending[0]["args"]["ratio"] is None
        finally:
            assert second.stop(timeout=120) == 0, second.logs()
