"""One task state on a real `mail server` process, with the memory store and with PostgreSQL.

- A plain message (`resume_from: user_response`) to a task paused at a breakpoint is accepted
  and closes the pause: the paused call gets a tool result in the history the model is sent
  next (every tool call has a result), `pending_breakpoints` empties, and a late breakpoint
  resume is a 409 — also after a kill -9 and a restart.
- A task waiting for review is never shown `completed: true`, before and after a kill -9.
- No pseudo-task row (`task_id = '*'`) is stored, also after a clean shutdown.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from mail.core.runtime_resume import BREAKPOINT_ANSWERED_BY_MESSAGE
from server_fixtures import ServerProcess, auth, create_key, free_port, healthy, write_config
from support.review_swarm import review_swarms_json
from support.scripted_llm import ScriptedLLM, reply, tool_call

pytestmark = pytest.mark.timeout(900)

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def _database_reachable() -> bool:
    try:
        conn = await asyncpg.connect(DATABASE_URL, timeout=3)
    except Exception:  # noqa: BLE001
        return False
    await conn.close()
    return True


async def _require_database() -> None:
    if not await _database_reachable():
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required but unreachable at {DATABASE_URL}")
        pytest.skip("PostgreSQL not reachable (set MAIL_REQUIRE_POSTGRES=1 to make this fail)")


async def _fetch(sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(DATABASE_URL)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def _until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _swarm(name: str, llm_url: str) -> dict[str, Any]:
    swarm = review_swarms_json(name, llm_url, "completions")
    swarm["breakpoint_tools"] = ["ask_human"]
    swarm["agents"][0]["actions"].append("ask_human")
    swarm["actions"].append(
        {
            "name": "ask_human",
            "description": "Ask the person a question.",
            "parameters": {
                "type": "object",
                "properties": {"question": {"type": "string"}},
                "required": ["question"],
            },
            "function": "python::tests.support.scripted_agents:echo_action",
        }
    )
    return swarm


async def _stored_rows(store: str, tmp_path: Path, sql: str, *args: Any) -> list[Any]:
    """Rows of a query on the server's database: PostgreSQL, or its SQLite file."""
    if store == "postgres":
        return list(await _fetch(sql, *args))
    import sqlite3

    conn = sqlite3.connect(tmp_path / "data" / "mail.db")
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(re.sub(r"\$\d+", "?", sql), args).fetchall()
    finally:
        conn.close()


class Harness:
    def __init__(self, tmp_path: Path, llm: ScriptedLLM, database: bool | str) -> None:
        # database: True / "postgres" (DATABASE_URL), "sqlite" (the default), else memory.
        self.tmp_path = tmp_path
        self.llm = llm
        self.port = free_port()
        self.swarm = f"state-{uuid.uuid4().hex[:8]}"
        self.key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
        self.env = {"DATABASE_URL": DATABASE_URL} if database in (True, "postgres") else {}
        self.args = [] if database in (True, "postgres", "sqlite") else ["--store", "memory"]
        (tmp_path / "swarms.json").write_text(json.dumps([_swarm(self.swarm, llm.base_url)]))
        self.config = write_config(tmp_path, port=self.port, swarm=self.swarm)

    @asynccontextmanager
    async def server(self) -> AsyncIterator[tuple[ServerProcess, httpx.AsyncClient]]:
        server = ServerProcess(
            self.tmp_path, self.port, args=["--config", str(self.config), *self.args], env=self.env
        ).start(wait=False)
        try:
            await healthy(server)
            async with httpx.AsyncClient(base_url=server.base_url, timeout=240) as client:
                yield server, client
        finally:
            if server.proc is not None and server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait(10)

    async def post(self, client: httpx.AsyncClient, **body: Any) -> httpx.Response:
        return await client.post("/message", json=body, headers=auth(self.key))

    async def task(self, client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
        r = await client.get("/task", params={"task_id": task_id}, headers=auth(self.key))
        assert r.status_code == 200, r.text
        return dict(r.json())


def _tool_results_sent(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


def _tool_calls_sent(messages: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for m in messages for c in m.get("tool_calls") or []]


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
async def test_message_to_a_breakpoint_pause_closes_it(tmp_path: Path, store: str) -> None:
    if store == "postgres":
        await _require_database()
    task_id = str(uuid.uuid4())
    async with ScriptedLLM() as llm:
        h = Harness(tmp_path, llm, store)
        async with h.server() as (server, client):
            llm.queue(tool_call("ask_human", {"question": "blue or red?"}, "bp1"))
            r = await h.post(client, body="paint it", task_id=task_id)
            assert r.status_code == 200, r.text
            assert json.loads(r.json()["response"])[0]["call_id"] == "bp1"
            record = await h.task(client, task_id)
            assert [p["tool_call_id"] for p in record["pending_breakpoints"]] == ["bp1"]

            llm.queue(reply(tool_call("task_complete", {"finish_message": "painted blue"})))
            r = await h.post(
                client, body="blue, please", task_id=task_id, resume_from="user_response"
            )
            assert r.status_code == 200, r.text
            assert r.json()["response"] == "painted blue"

            # The model was sent a result for the paused call, then the person's message.
            messages = llm.requests[-1].messages
            results = _tool_results_sent(messages)
            assert results.get("bp1") == BREAKPOINT_ANSWERED_BY_MESSAGE, messages
            assert set(_tool_calls_sent(messages)) <= set(results), messages
            last_user = [m for m in messages if m.get("role") == "user"][-1]
            assert "blue, please" in json.dumps(last_user)

            record = await h.task(client, task_id)
            assert record["pending_breakpoints"] == []
            assert record["completed"] is True
            events = [e["event"] for e in record["events"]]
            assert "breakpoint_action_complete" in events

            late = {
                "body": "",
                "task_id": task_id,
                "resume_from": "breakpoint_tool_call",
                "kwargs": {"breakpoint_tool_call_result": "red"},
            }
            r = await h.post(client, **late)
            assert r.status_code == 409, r.text
            assert (await h.task(client, task_id))["state"] == "completed"

            if store != "memory":

                async def stored_closed() -> bool:
                    rows = await _stored_rows(
                        store,
                        tmp_path,
                        "SELECT metadata FROM tasks WHERE swarm_name = $1 AND task_id = $2",
                        h.swarm,
                        task_id,
                    )
                    meta = json.loads(rows[0]["metadata"]) if rows else {}
                    return bool(rows) and meta.get("state") == "completed"

                await _until(stored_closed, "the closed pause to be stored")
                assert server.proc is not None
                server.proc.kill()  # kill -9: no shutdown hooks run
                server.proc.wait(10)

        if store != "memory":
            async with h.server() as (server, client):
                record = await h.task(client, task_id)
                assert record["pending_breakpoints"] == [] and record["completed"] is True
                r = await h.post(client, **late)
                assert r.status_code == 409, r.text
                assert server.stop() == 0


async def test_review_wait_is_not_completed_and_no_pseudo_task_rows(tmp_path: Path) -> None:
    await _require_database()
    task_id = str(uuid.uuid4())
    async with ScriptedLLM() as llm:
        h = Harness(tmp_path, llm, database=True)
        async with h.server() as (server, client):
            llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "draft"}, "k1"))
            r = await h.post(client, body="email bob", task_id=task_id)
            assert r.status_code == 200, r.text
            record = await h.task(client, task_id)
            assert record["completed"] is False and record["is_running"] is False
            assert [p["tool_call_id"] for p in record["pending_reviews"]] == ["k1"]
            assert record["state"] == "waiting_for_review"

            async def stored_waiting() -> bool:
                rows = await _fetch(
                    "SELECT completed, metadata FROM tasks WHERE swarm_name = $1 AND task_id = $2",
                    h.swarm,
                    task_id,
                )
                if not rows:
                    return False
                meta = json.loads(rows[0]["metadata"])
                return bool(meta.get("pending_reviews")) and rows[0]["completed"] is False

            await _until(stored_waiting, "the review wait to be stored")
            assert server.proc is not None
            server.proc.kill()  # kill -9 while the task waits for review
            server.proc.wait(10)

        async with h.server() as (server, client):
            record = await h.task(client, task_id)
            assert record["completed"] is False and record["is_running"] is False
            assert [p["tool_call_id"] for p in record["pending_reviews"]] == ["k1"]
            assert record["state"] == "waiting_for_review"
            listed = (await client.get("/tasks", headers=auth(h.key))).json()
            assert listed[task_id]["completed"] is False
            # A plain message is refused while the review waits; the decision continues it.
            r = await h.post(client, body="hello?", task_id=task_id, resume_from="user_response")
            assert r.status_code == 409, r.text
            llm.queue(reply(tool_call("task_complete", {"finish_message": "sent"})))
            r = await h.post(
                client,
                body="",
                task_id=task_id,
                resume_from="action_review",
                kwargs={"decisions": [{"tool_call_id": "k1", "type": "accept"}]},
            )
            assert r.status_code == 200 and r.json()["response"] == "sent", r.text
            record = await h.task(client, task_id)
            assert record["completed"] is True and record["state"] == "completed"
            assert server.stop() == 0  # a clean shutdown emits the runtime's own events

    rows = await _fetch("SELECT task_id, is_running FROM tasks WHERE swarm_name = $1", h.swarm)
    assert [r["task_id"] for r in rows] == [task_id], rows
    events = await _fetch(
        "SELECT count(*) AS n FROM task_events WHERE swarm_name = $1 AND task_id = '*'", h.swarm
    )
    assert events[0]["n"] == 0


@pytest.mark.parametrize("order", ["message_first", "resume_first"])
async def test_message_and_breakpoint_resume_at_once(tmp_path: Path, order: str) -> None:
    """A plain message and a breakpoint resume sent together to one pause: one of them
    closes it; the paused call never gets two results, nor none."""
    task_id = str(uuid.uuid4())
    async with ScriptedLLM() as llm:
        h = Harness(tmp_path, llm, False)
        async with h.server() as (_server, client):
            llm.queue(tool_call("ask_human", {"question": "blue or red?"}, "bp1"))
            r = await h.post(client, body="paint it", task_id=task_id)
            assert r.status_code == 200, r.text
            llm.queue(reply(tool_call("task_complete", {"finish_message": "one"})))
            llm.queue(reply(tool_call("task_complete", {"finish_message": "two"})))
            message = h.post(
                client, body="blue, please", task_id=task_id, resume_from="user_response"
            )
            resume = h.post(
                client,
                body="",
                task_id=task_id,
                resume_from="breakpoint_tool_call",
                kwargs={"breakpoint_tool_call_result": "red"},
            )
            first, second = (message, resume) if order == "message_first" else (resume, message)
            answers = await asyncio.gather(first, second)
            statuses = sorted(a.status_code for a in answers)
            assert statuses[0] == 200, [a.text for a in answers]
            for request in llm.requests[1:]:
                results = [
                    m
                    for m in request.messages
                    if m.get("role") == "tool" and m.get("tool_call_id") == "bp1"
                ]
                assert len(results) == 1, request.messages
            record = await h.task(client, task_id)
            assert record["pending_breakpoints"] == [], record
