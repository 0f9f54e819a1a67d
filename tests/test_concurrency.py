"""Tasks on one swarm run concurrently: 100 tasks x 3 sequential 50 ms agent calls."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mail import MAILAgentTemplate, MAILSwarm, MAILSwarmTemplate
from support.scripted_agents import ScriptedAgent, send_request, send_response, task_complete

TASKS = 100
LATENCY = 0.05
CALLS_PER_TASK = 3
SERIAL_TIME = TASKS * CALLS_PER_TASK * LATENCY  # 15 s


def _supervisor_step(history: list[dict[str, Any]], tool_choice: Any) -> list[Any]:
    last = str(history[-1].get("content", ""))
    if '<from type="user">' in last:
        body = last.split("<body>")[1].split("</body>")[0]
        return [send_request("worker", body)]
    answer = last.split("<body>")[1].split("</body>")[0]
    return [task_complete(f"answer: {answer}")]


def _worker_step(history: list[dict[str, Any]], tool_choice: Any) -> list[Any]:
    body = str(history[-1]["content"]).split("<body>")[1].split("</body>")[0]
    return [send_response("supervisor", body.upper())]


class Gauge:
    """Counts agent calls in flight to measure effective concurrency."""

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0

    def wrap(self, agent: ScriptedAgent) -> Any:
        async def fn(history: list[dict[str, Any]], tool_choice: Any) -> Any:
            self.current += 1
            self.peak = max(self.peak, self.current)
            try:
                return await agent(history, tool_choice)
            finally:
                self.current -= 1

        return fn


def build_swarm(gauge: Gauge) -> MAILSwarm:
    def supervisor_factory(**kwargs: Any) -> Any:
        return gauge.wrap(ScriptedAgent("supervisor", default=_supervisor_step, sleep=LATENCY))

    def worker_factory(**kwargs: Any) -> Any:
        return gauge.wrap(ScriptedAgent("worker", default=_worker_step, sleep=LATENCY))

    template = MAILSwarmTemplate(
        name="loadtest",
        agents=[
            MAILAgentTemplate(
                "supervisor",
                supervisor_factory,
                ["worker"],
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            MAILAgentTemplate("worker", worker_factory, ["supervisor"]),
        ],
        entrypoint="supervisor",
    )
    return template.instantiate(user_id="load-user")


@pytest.mark.timeout(30)
async def test_100_tasks_run_concurrently_on_one_swarm() -> None:
    gauge = Gauge()
    swarm = build_swarm(gauge)
    started = time.monotonic()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(swarm.post_message(f"job {i}", task_id=f"task-{i}", timeout=20) for i in range(TASKS))
        ),
        20,
    )
    elapsed = time.monotonic() - started
    bodies = [response["message"]["body"] for response, _ in results]
    assert bodies == [f"answer: JOB {i}" for i in range(TASKS)]
    assert elapsed < 0.25 * SERIAL_TIME, f"{elapsed:.2f}s for {TASKS} tasks"
    assert gauge.peak >= TASKS * 0.9
    assert len(swarm.get_all_tasks()) == TASKS
    await swarm.shutdown()


@pytest.mark.timeout(30)
async def test_100_tasks_run_concurrently_under_run_continuous() -> None:
    gauge = Gauge()
    swarm = build_swarm(gauge)
    loop = asyncio.create_task(swarm.run_continuous())
    try:
        started = time.monotonic()
        results = await asyncio.wait_for(
            asyncio.gather(*(swarm.post_message(f"job {i}", timeout=20) for i in range(TASKS))),
            20,
        )
        elapsed = time.monotonic() - started
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 5)
    assert all(r["message"]["subject"] == "::task_complete::" for r, _ in results)
    assert elapsed < 0.25 * SERIAL_TIME, f"{elapsed:.2f}s for {TASKS} tasks"
    assert gauge.peak >= TASKS * 0.9


@pytest.mark.timeout(30)
async def test_post_message_while_the_ephemeral_loop_is_stopping_is_served() -> None:
    # Without run_continuous, each post_message serves the mailbox only while some call is
    # in flight. A call that arrives just as the last one is shutting that loop down must
    # get a loop of its own, not hang until its timeout.
    swarm = build_swarm(Gauge())
    rt = swarm.runtime
    first = asyncio.create_task(swarm.post_message("first", timeout=5))

    async def arrive_while_stopping() -> tuple[Any, float]:
        for _ in range(100_000):
            if rt._stop_serving and rt._loop_running:
                break
            await asyncio.sleep(0)
        else:
            pytest.fail("never observed the temporary loop stopping")
        started = time.monotonic()
        response, _ = await swarm.post_message("second", timeout=2)
        return response, time.monotonic() - started

    second = asyncio.create_task(arrive_while_stopping())
    first_response, _ = await asyncio.wait_for(first, 5)
    response, elapsed = await asyncio.wait_for(second, 5)
    assert first_response["message"]["body"] == "answer: FIRST"
    assert response["message"]["body"] == "answer: SECOND", response["message"]["body"]
    assert elapsed < 1.0
