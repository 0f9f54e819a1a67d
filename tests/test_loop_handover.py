"""A continuous loop started while calls already run on a temporary loop takes over cleanly.

The server starts an instance's `run_continuous` as a task and serves requests at once, so
the first requests of a new instance run before that loop has taken a step: they start a
temporary loop, and the continuous loop must take over from it. Nothing may fail, hang or
stop the continuous loop, however the calls interleave with the hand-over.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from mail import MAILSwarm
from support.relay_swarm import relay_swarm


def _swarm(latency: float) -> MAILSwarm:
    return relay_swarm(latency, "handover")


async def _one_round(rng: random.Random) -> None:
    swarm = _swarm(rng.choice([0.0, 0.0005, 0.002]))
    clients, calls = 16, 6

    async def client(number: int) -> list[str]:
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        answers = []
        for call in range(calls):
            response, _ = await swarm.post_message(f"c{number} m{call}", timeout=10)
            answers.append(response["message"]["body"])
            if rng.random() < 0.3:
                await asyncio.sleep(rng.choice([0, 0.001, 0.005]))
        return answers

    calls_in_flight = asyncio.gather(*(client(n) for n in range(clients)))
    await asyncio.sleep(rng.choice([0, 0.001, 0.004, 0.011, 0.02]))
    loop = asyncio.create_task(swarm.run_continuous())
    try:
        results = await asyncio.wait_for(calls_in_flight, 20)
        assert not loop.done(), "the continuous loop stopped"
        response, _ = await asyncio.wait_for(swarm.post_message("after", timeout=5), 5)
        assert response["message"]["body"] == "answer: AFTER"
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 5)
    for number, answers in enumerate(results):
        assert answers == [f"answer: C{number} M{call}" for call in range(calls)]


@pytest.mark.timeout(120)
async def test_requests_racing_the_start_of_the_continuous_loop_are_all_served() -> None:
    rng = random.Random(7)
    for _ in range(30):
        await _one_round(rng)


@pytest.mark.timeout(30)
async def test_a_call_waiting_on_a_stopping_temporary_loop_joins_the_continuous_loop() -> None:
    # The interleaving that made the server answer 500 and lose an instance: a call waits for
    # a temporary loop to stop, a continuous loop starts meanwhile, and the waiting call then
    # started a second loop on the same mailbox (whose failure stopped the continuous one).
    swarm = _swarm(0.02)
    rt = swarm.runtime
    serve = rt.loops._serve
    loops_started = 0

    async def counting_serve() -> None:
        nonlocal loops_started
        loops_started += 1
        await serve()

    rt.loops._serve = counting_serve  # type: ignore[method-assign]
    first = asyncio.create_task(swarm.post_message("first", timeout=5))
    for _ in range(100_000):  # until the first call's temporary loop is stopping
        if rt._stop_serving and rt._loop_running:
            break
        await asyncio.sleep(0)
    else:
        pytest.fail("never observed the temporary loop stopping")
    second = asyncio.create_task(swarm.post_message("second", timeout=5))
    await asyncio.sleep(0)  # the second call is now waiting for that loop to stop
    loops_started = 0
    loop = asyncio.create_task(swarm.run_continuous())
    try:
        (first_answer, _), (second_answer, _) = await asyncio.wait_for(
            asyncio.gather(first, second), 10
        )
        assert first_answer["message"]["body"] == "answer: FIRST"
        assert second_answer["message"]["body"] == "answer: SECOND"
        assert loops_started == 1, "the waiting call started a loop of its own"
        third, _ = await asyncio.wait_for(swarm.post_message("third", timeout=5), 5)
        assert third["message"]["body"] == "answer: THIRD"
        assert not loop.done() and loops_started == 1
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 5)


@pytest.mark.timeout(30)
async def test_a_second_run_continuous_is_refused_and_leaves_the_first_serving() -> None:
    swarm = _swarm(0.0)
    loop = asyncio.create_task(swarm.run_continuous())
    try:
        response, _ = await asyncio.wait_for(swarm.post_message("one", timeout=5), 5)
        assert response["message"]["body"] == "answer: ONE"
        with pytest.raises(RuntimeError, match="already running"):
            await swarm.run_continuous()
        response, _ = await asyncio.wait_for(swarm.post_message("two", timeout=5), 5)
        assert response["message"]["body"] == "answer: TWO"
        assert not loop.done()
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 5)
