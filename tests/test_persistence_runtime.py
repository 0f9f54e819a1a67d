"""Persistence through a running swarm: a database outage during a task, and
acknowledge_broadcast memory written and found again (PostgreSQL and in-memory)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

import asyncpg
import pytest
from tests.support.pg_schema import reachable_database
from tests.support.store_outage import store_behind_proxy, tool_call

from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.core.message import create_agent_address, make_broadcast, make_message
from mail.store.agent_memory import create_agent_memory

pytestmark = pytest.mark.timeout(90)

DATABASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
FAST = {"min_size": 1, "max_size": 3, "batch_delay": 0.005, "retry_initial": 0.05, "retry_max": 0.3}


@pytest.fixture(scope="module")
def database() -> str:
    return reachable_database(DATABASE_URL)


def _echo_factory(**_: Any):  # noqa: ANN202
    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        return None, [tool_call("task_complete", {"finish_message": "done while the db was down"})]

    return agent


def _ack_factory(**_: Any):  # noqa: ANN202
    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        last = history[-1].get("content", "")
        if "roadmap" in last:
            return None, [tool_call("acknowledge_broadcast", {"note": "keep for the Q3 review"})]
        return None, [tool_call("task_complete", {"finish_message": "ok"})]

    return agent


def _template(factory: Any, name: str, analyst: str = "analyst") -> MAILSwarmTemplate:
    return MAILSwarmTemplate(
        name=name,
        agents=[
            MAILAgentTemplate(
                "supervisor", factory, [analyst], enable_entrypoint=True, can_complete_tasks=True
            ),
            MAILAgentTemplate(analyst, factory, ["supervisor"]),
        ],
        actions=[],
        entrypoint="supervisor",
    )


async def test_outage_during_a_task_is_retried_reported_and_written_later(database: str) -> None:
    swarm_name = f"outage-{uuid.uuid4().hex[:8]}"
    swarm = _template(_echo_factory, swarm_name).instantiate({}, user_id="alice")
    async with store_behind_proxy(database, swarm, **FAST, connect_timeout=2) as (store, proxy):
        await proxy.stop()  # the database stops accepting connections mid-life
        started = time.monotonic()
        response, _ = await swarm.post_message(body="work please", task_id="t-outage")
        assert response["message"]["body"] == "done while the db was down"
        # The task is not held hostage by the database (one bounded flush wait at most).
        assert time.monotonic() - started < 8
        for _ in range(200):
            if store.failed_attempts >= 1:
                break
            await asyncio.sleep(0.02)
        assert store.is_degraded() and store.last_error
        assert store.pending_writes > 0

        await proxy.start()
        assert await swarm.flush_store(timeout=15)
        assert not store.is_degraded()

    conn = await asyncpg.connect(database)
    try:
        row = await conn.fetchrow(
            "SELECT completed FROM tasks WHERE swarm_name = $1 AND task_id = 't-outage'",
            swarm_name,
        )
        events = await conn.fetch(
            "SELECT event_type FROM task_events WHERE swarm_name = $1 AND task_id = 't-outage'",
            swarm_name,
        )
        response_row = await conn.fetchrow(
            "SELECT response FROM task_responses WHERE swarm_name = $1", swarm_name
        )
    finally:
        await conn.close()
    assert row is not None and row["completed"] is True
    assert {"new_message", "tool_call", "task_complete_call"} <= {e["event_type"] for e in events}
    stored = response_row["response"]
    stored = json.loads(stored) if isinstance(stored, str) else stored
    assert stored["message"]["body"] == "done while the db was down"


@pytest.mark.parametrize("backend", ["memory", "postgres"])
async def test_acknowledged_broadcast_is_stored_and_found(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("database") if backend == "postgres" else None
    memory = await create_agent_memory(url)
    # A fresh agent name: the PostgreSQL memory table outlives test runs.
    analyst = f"analyst_{uuid.uuid4().hex[:8]}"
    swarm = _template(_ack_factory, f"ack-{uuid.uuid4().hex[:8]}", analyst).instantiate(
        {}, user_id="u"
    )
    swarm.runtime.memory = memory
    try:
        loop = asyncio.create_task(swarm.run_continuous())
        task_id = str(uuid.uuid4())
        broadcast = make_message(
            make_broadcast(
                task_id,
                create_agent_address("supervisor"),
                [create_agent_address(analyst)],
                "FYI",
                "The product roadmap moved to Q3.",
            ),
            "broadcast",
        )
        swarm.runtime.submit(broadcast)
        await swarm.await_queue_empty()
        found = await memory.search(analyst, "roadmap Q3")
        assert found, "the acknowledged broadcast was not found"
        text = json.dumps(found)
        assert "The product roadmap moved to Q3." in text
        assert "<acknowledged broadcast/>" in text and "keep for the Q3 review" in text
        # The sender keeps nothing of it (its namespace is shared with other users of the
        # test database, e.g. docs/database.md's example: look for this broadcast only).
        assert "moved to Q3" not in json.dumps(await memory.search("supervisor", "roadmap"))
        await swarm.shutdown()
        await loop
    finally:
        await memory.close()
