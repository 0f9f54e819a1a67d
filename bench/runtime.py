"""Runtime throughput benchmark (not a test): prints numbers.

Tasks of 3 sequential agent calls (supervisor -> worker -> supervisor/task_complete) with
stub agents: tasks/s for 50, 200 and 800 concurrent tasks at zero latency, and the effective
concurrency for 200 tasks at 50 ms simulated latency per call, next to its floor measured in
the same rounds: 200 bare asyncio coroutines of 3 sleeps of 50 ms each (what the machine's event
loop allows with no runtime at all).

Fan-in: one task whose supervisor sends 50 requests in one turn (or one broadcast to 50
workers); every worker answers; the supervisor completes once it has all 50 answers. Wall time
and agent calls at 0 and 50 ms per call (critical path at 50 ms: 3 calls = 150 ms), with
batched delivery (the default) and without it.

    uv run python bench/runtime.py            (everything)
    uv run python bench/runtime.py --fan-in   (the fan-in part only)
"""

from __future__ import annotations

import os
import sys

# bench/http.py would shadow the standard library's `http` package for scripts run from here.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import asyncio  # noqa: E402
import gc  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate  # noqa: E402

COMPLETION = {"role": "assistant", "content": None}


# The stub agents return prebuilt calls: the benchmark measures the runtime, not the cost of
# building pydantic objects inside a fake model.
DELEGATE = AgentToolCall(
    tool_name="send_request",
    tool_args={"target": "worker", "subject": "job", "body": "do it"},
    tool_call_id="c1",
    completion=COMPLETION,
)
FINISH = AgentToolCall(
    tool_name="task_complete",
    tool_args={"finish_message": "done"},
    tool_call_id="c3",
    completion=COMPLETION,
)
ANSWER = AgentToolCall(
    tool_name="send_response",
    tool_args={"target": "supervisor", "subject": "re: job", "body": "result"},
    tool_call_id="c2",
    completion=COMPLETION,
)


def supervisor_factory(latency: float = 0.0, **_: Any) -> Any:
    async def supervisor(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        if latency:
            await asyncio.sleep(latency)
        last = history[-1].get("content") or ""
        return None, [DELEGATE if 'type="user"' in last else FINISH]

    return supervisor


def worker_factory(latency: float = 0.0, **_: Any) -> Any:
    async def worker(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        if latency:
            await asyncio.sleep(latency)
        return None, [ANSWER]

    return worker


def build_template(latency: float) -> MAILSwarmTemplate:
    params = {"latency": latency}
    return MAILSwarmTemplate(
        name="bench",
        version="1.0.0",
        agents=[
            MAILAgentTemplate(
                "supervisor",
                supervisor_factory,
                ["worker"],
                agent_params=params,
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            MAILAgentTemplate("worker", worker_factory, ["supervisor"], agent_params=params),
        ],
        actions=[],
        entrypoint="supervisor",
    )


async def run_batch(n: int, latency: float) -> float:
    swarm = build_template(latency).instantiate({}, user_id="bench")
    loop_task = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0)
    start = time.perf_counter()
    results = await asyncio.gather(*(swarm.post_message("go") for _ in range(n)))
    elapsed = time.perf_counter() - start
    assert all(r["message"]["body"] == "done" for r, _ in results), "a task failed"
    await swarm.shutdown()
    await loop_task
    return elapsed


async def run_floor(n: int, latency: float) -> float:
    """The floor of the latency row: `n` bare coroutines, each 3 sequential sleeps."""

    async def task() -> None:
        for _ in range(3):
            await asyncio.sleep(latency)

    start = time.perf_counter()
    await asyncio.gather(*(task() for _ in range(n)))
    return time.perf_counter() - start


async def main() -> None:
    gc.collect()
    # Same collector settings as `mail server` (see mail.server.app_factory.tune_gc).
    from mail.server.app_factory import tune_gc

    tune_gc()
    if os.environ.get("BENCH_NO_GC"):
        gc.disable()
    await run_batch(50, 0.0)  # warm-up
    sizes = (50, 200, 800)
    for n in sizes:
        await run_batch(n, 0.0)  # warm-up at this size
    # Interleave the sizes round by round so that machine noise (this runs on shared VMs)
    # hits every size alike; report the median rate of each.
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    started = time.perf_counter()
    while len(samples[800]) < 12 or time.perf_counter() - started < 6.0:
        for n in sizes:
            for _ in range(max(1, 800 // n // 4)):  # similar time per size in each round
                samples[n].append(n / await run_batch(n, 0.0))
    rates = {n: statistics.median(samples[n]) for n in sizes}
    for n in sizes:
        print(
            f"zero latency, {n:4d} concurrent tasks: {rates[n]:8.0f} tasks/s ({len(samples[n])} runs)"
        )
    print(f"rate kept at 800 vs 50: {100 * rates[800] / rates[50]:.0f}%")
    latency = 0.05
    await run_batch(200, latency)  # warm-up
    # The runtime and its floor alternate, so both see the same machine.
    walls: list[float] = []
    floors: list[float] = []
    for _ in range(7):
        walls.append(await run_batch(200, latency))
        floors.append(await run_floor(200, latency))
    elapsed, floor = statistics.median(walls), statistics.median(floors)
    serial = 200 * 3 * latency
    print(
        f"50 ms latency, 200 tasks: {elapsed:.3f} s (serial {serial:.0f} s, ideal {3 * latency:.2f} s); "
        f"effective concurrency {serial / elapsed:.0f} of 200 (median of 7 runs)"
    )
    print(
        f"50 ms latency, 200 bare asyncio coroutines (3 sleeps each, the floor): {floor:.3f} s; "
        f"effective concurrency {serial / floor:.0f} of 200 (median of 7 runs)"
    )


FAN = 50


def fan_in_template(latency: float, broadcast: bool, batch_delivery: bool) -> MAILSwarmTemplate:
    workers = [f"w{i}" for i in range(FAN)]
    requests = [
        AgentToolCall(
            tool_name="send_request",
            tool_args={"target": w, "subject": "job", "body": "do it"},
            tool_call_id=f"r{i}",
            completion=COMPLETION,
        )
        for i, w in enumerate(workers)
    ]
    shout = AgentToolCall(
        tool_name="send_broadcast",
        tool_args={"subject": "job", "body": "everyone: do it"},
        tool_call_id="b",
        completion=COMPLETION,
    )
    wait = AgentToolCall(
        tool_name="await_message", tool_args={}, tool_call_id="a", completion=COMPLETION
    )

    def supervisor_factory(**_: Any) -> Any:
        async def supervisor(history: list[dict[str, Any]], tool_choice: Any) -> Any:
            if latency:
                await asyncio.sleep(latency)
            answers = sum(
                1 for h in history if "<subject>re: job</subject>" in str(h.get("content"))
            )
            if answers >= FAN:
                return None, [FINISH]
            if len(history) == 1:
                return None, [shout] if broadcast else list(requests)
            return None, [wait]

        return supervisor

    def worker_factory(**_: Any) -> Any:
        async def worker(history: list[dict[str, Any]], tool_choice: Any) -> Any:
            if latency:
                await asyncio.sleep(latency)
            return None, [ANSWER]

        return worker

    agents = [
        MAILAgentTemplate(
            "supervisor",
            supervisor_factory,
            workers,
            enable_entrypoint=True,
            can_complete_tasks=True,
        )
    ] + [MAILAgentTemplate(w, worker_factory, ["supervisor"]) for w in workers]
    return MAILSwarmTemplate(
        name="fanin",
        version="1.0.0",
        agents=agents,
        actions=[],
        entrypoint="supervisor",
        batch_delivery=batch_delivery,
    )


async def run_fan_in(latency: float, broadcast: bool, batch: bool) -> tuple[float, int, int]:
    """(wall seconds, supervisor calls, all agent calls) of one fan-in task."""
    calls = {"supervisor": 0, "all": 0}
    template = fan_in_template(latency, broadcast, batch)
    swarm = template.instantiate({}, user_id="bench")
    for name, agent in swarm.runtime.agents.items():
        inner = agent.function

        async def counted(history: Any, choice: Any, inner: Any = inner, name: str = name) -> Any:
            calls["all"] += 1
            if name == "supervisor":
                calls["supervisor"] += 1
            return await inner(history, choice)

        agent.function = counted
    loop_task = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0)
    start = time.perf_counter()
    response, _ = await swarm.post_message("go", timeout=120)
    elapsed = time.perf_counter() - start
    assert response["message"]["body"] == "done", response
    await swarm.shutdown()
    await loop_task
    return elapsed, calls["supervisor"], calls["all"]


async def fan_in() -> None:
    print(f"fan-in of {FAN} (one task; supervisor completes after all {FAN} answers):")
    for latency in (0.0, 0.05):
        for broadcast in (False, True):
            for batch in (True, False):
                runs = [await run_fan_in(latency, broadcast, batch) for _ in range(5)]
                wall = statistics.median(r[0] for r in runs)
                sup, total = runs[-1][1], runs[-1][2]
                what = "broadcast" if broadcast else f"{FAN} requests"
                mode = "batched" if batch else "one per turn"
                verdict = ""
                if latency and batch:
                    ok = wall <= 0.25 and sup <= 4
                    verdict = "  (target met)" if ok else "  (TARGET MISSED: <= 250 ms, <= 4 calls)"
                print(
                    f"  {int(latency * 1000):2d} ms/call, {what:<12} {mode:<13} "
                    f"{1000 * wall:8.1f} ms  supervisor calls {sup:3d}  agent calls {total:3d}"
                    f"{verdict}"
                )


if __name__ == "__main__":
    if "--fan-in" in sys.argv:
        asyncio.run(fan_in())
        sys.exit(0)
    asyncio.run(main())
    asyncio.run(fan_in())
