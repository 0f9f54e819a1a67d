"""What a database outage may cost in memory: the task store's queue is bounded
(`max_pending`), and so is what waits outside it. A running task's events, queued as one
run per task, close at `MAX_RUN_EVENTS` (each run one item under the bound); once the
queue is full the writes of the instance wait in its drain, and the agents' next turns wait
for the database instead of making more. Nothing acknowledged is lost: when the database
is back every event is stored, in order, and the task finishes.

The outage is real: PostgreSQL behind a TCP proxy that the test stops (connection refused).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from tests.support.pg_schema import BASE_URL, fetch_rows, scratch_schema, with_search_path
from tests.support.store_outage import store_behind_proxy, tool_call

from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.api.persistence import MAX_RUN_EVENTS

pytestmark = pytest.mark.timeout(120)

FAST = {"min_size": 1, "max_size": 2, "batch_delay": 0.005, "retry_initial": 0.05, "retry_max": 0.3}
MAX_PENDING = 8
ROUNDS = 200  # request/response rounds the task makes before it completes (400 turns)


@pytest.fixture(scope="module")
def database() -> Any:
    with scratch_schema("mail_outage", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


TURNS = [0]


def _asker(**_: Any):  # noqa: ANN202
    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        TURNS[0] += 1
        asked = sum(1 for m in history if m.get("role") == "assistant")
        if asked >= ROUNDS:
            return None, [tool_call("task_complete", {"finish_message": "all rounds done"})]
        return None, [tool_call("send_request", {"target": "peer", "subject": "q", "body": "more"})]

    return agent


def _peer(**_: Any):  # noqa: ANN202
    async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        TURNS[0] += 1
        return None, [
            tool_call("send_response", {"target": "supervisor", "subject": "a", "body": "ok"})
        ]

    return agent


def _template(name: str, histories: bool) -> MAILSwarmTemplate:
    return MAILSwarmTemplate(
        name=name,
        agents=[
            MAILAgentTemplate(
                "supervisor", _asker, ["peer"], enable_entrypoint=True, can_complete_tasks=True
            ),
            MAILAgentTemplate("peer", _peer, ["supervisor"]),
        ],
        actions=[],
        entrypoint="supervisor",
        enable_db_agent_histories=histories,
    )


async def _until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# Without stored histories a turn's only writes are its events (one run per task) and the
# task's record: the run's cap is what brings the queue to its bound.
@pytest.mark.parametrize("histories", [True, False], ids=["histories", "events-only"])
async def test_a_long_outage_holds_running_tasks_still_instead_of_growing_memory(
    database: str, histories: bool
) -> None:
    swarm_name = f"outage-{uuid.uuid4().hex[:8]}"
    swarm = _template(swarm_name, histories).instantiate({}, user_id="alice")
    swarm.task_message_limit = 10 * ROUNDS
    runs: list[int] = []
    TURNS[0] = 0
    options = {**FAST, "max_pending": MAX_PENDING, "connect_timeout": 2}
    async with store_behind_proxy(database, swarm, **options) as (store, proxy):
        observer = swarm._store_observer
        assert observer is not None
        await proxy.stop()  # the database stops accepting connections
        work = asyncio.create_task(swarm.post_message(body="go", task_id="t-long"))
        await _until(store.writes_backed_up, "the store's queue to fill")
        # The agents now wait for the database: the task does not go on to its end (it
        # took well under a second with the database up), and what waits stays bounded.
        await _until(lambda: observer._backlog > 0, "writes to wait in the drain")
        turns_then = TURNS[0]
        done, _ = await asyncio.wait({work}, timeout=3.0)
        assert not done, f"the task ran {TURNS[0]} turns to its end while the database was down"
        assert TURNS[0] - turns_then <= 2, (turns_then, TURNS[0])
        assert store.pending_writes <= MAX_PENDING
        assert observer._backlog <= 40, observer._backlog
        for write in list(store._buffer._queue):
            if write.kind == "run":
                runs.append(len(write.args[1].events))
        assert runs and max(runs) <= MAX_RUN_EVENTS, runs

        await proxy.start()  # back on the same port
        response, _ = await asyncio.wait_for(work, 60)
        assert response["message"]["body"] == "all rounds done"
        assert await swarm.flush_store(timeout=30)
        events = len(swarm.get_task_by_id("t-long").events)

    stored = await fetch_rows(
        database,
        "SELECT event_id FROM task_events WHERE swarm_name = $1 AND task_id = 't-long' "
        "ORDER BY seq",
        swarm_name,
    )
    assert len(stored) == events
