"""Stress of issue 42's hot path (branch i42b): turns handing over within a task (contexts,
failures, shutdown, fairness, long chains), pooled ids, cached timestamps, the caller's timer.

The runtime tests pass on main too (same behaviour expected); the id tests read the i42b pool.
test_submit_and_wait_without_a_timeout_waits passes on main and fails on i42b."""

from __future__ import annotations

import asyncio
import datetime
import json
import multiprocessing
import os
import re
import sys
import threading
from typing import Any

import pytest

from mail.core import message as message_module
from mail.core.instance_context import current_instance
from mail.core.message import new_id, utc_now_iso
from mail.telemetry.meter import CURRENT_TURN
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    make_runtime,
    run_task,
    send_request,
    send_response,
    task_complete,
    tool_call,
    two_agent_runtime,
    user_message,
)


async def test_contexts_seen_by_each_turn_after_a_model_wait() -> None:
    """The meter's current turn is the running agent's; no action's instance leaks out."""
    seen: list[tuple[str, Any, Any]] = []

    def recording(name: str, calls: list[Any]) -> Any:
        def step(history: Any, tool_choice: Any) -> list[Any]:
            turn = CURRENT_TURN.get()
            seen.append((name, turn.agent if turn else None, current_instance.get()))
            return calls

        return step

    async def act(args: dict[str, Any]) -> str:
        return f"acting for {current_instance.get()}"

    rt, sup, wrk = two_agent_runtime(
        [
            recording("supervisor", [tool_call("act", {}), send_request("worker", "go")]),
            recording("supervisor", [task_complete("done")]),
        ],
        [recording("worker", [send_response("supervisor", "result")])],
        actions={"act": act},
    )
    sup.sleep = wrk.sleep = 0.001
    response = await run_task(rt)
    assert response["message"]["body"] == "done"
    assert [s[0] for s in seen] == [s[1] for s in seen]  # CURRENT_TURN is the running agent
    assert all(s[2] is None for s in seen)  # current_instance only around the action


async def test_an_agent_error_in_a_handed_over_turn() -> None:
    rt, sup, wrk = two_agent_runtime(
        [[send_request("worker", "go")], [task_complete("done")]],
        [RuntimeError("model exploded")],
    )
    sup.sleep = wrk.sleep = 0.001
    response = await run_task(rt)
    assert response["message"]["body"] == "done"  # the supervisor heard and ended the task
    assert [e.event for e in rt.get_task_events("t1")] == [
        "new_message",
        "tool_call",
        "new_message",
        "agent_error",
        "new_message",
        "tool_call",
        "task_complete_call",
        "new_message",
        "task_complete",
    ]
    last = [h["content"] for h in sup.calls[-1].history if h.get("role") == "user"][-1]
    assert "::agent_error::" in last and "model exploded" in last
    await rt.await_idle()
    assert not rt._turns and not rt._turns_by_task


async def test_a_thousand_hops_after_model_waits() -> None:
    hops = 1000
    sup = ScriptedAgent(
        "supervisor",
        [[send_request("worker", f"go {i}")] for i in range(hops)] + [[task_complete("done")]],
        sleep=0.0001,
    )
    depths: list[int] = []

    def worker_step(history: Any, tool_choice: Any) -> list[Any]:
        frame, depth = sys._getframe(), 0
        while frame is not None:
            frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
        depths.append(depth)
        return [send_response("supervisor", "ok")]

    wrk = ScriptedAgent("worker", default=worker_step, sleep=0.0001)
    rt = make_runtime(
        {"supervisor": AgentSpec(sup, ["worker"], True), "worker": AgentSpec(wrk, ["supervisor"])}
    )
    rt.default_max_steps = None  # type: ignore[assignment]
    rt.loop_guard.max_turns = None
    rt.loop_guard.max_messages = None
    response = await run_task(rt, timeout=60, max_steps=10_000)
    assert response["message"]["body"] == "done", response["message"]["body"][:300]
    assert len(sup.calls) == hops + 1 and len(wrk.calls) == hops
    assert max(depths) == min(depths)  # the hand-over is a loop: the stack does not grow


async def test_a_ping_pong_task_with_tiny_waits_does_not_starve_another() -> None:
    """Task A's agents answer each other forever after a zero-length sleep; task B, whose
    model takes 20 ms a call, finishes its three turns while A is still going."""
    stop = asyncio.Event()

    def forever(target: str) -> Any:
        def step(history: Any, tool_choice: Any) -> list[Any]:
            if stop.is_set():
                return [task_complete("stopped")] if target == "worker" else []
            return [send_request(target, "again")]

        return step

    sup = ScriptedAgent("supervisor", default=forever("worker"), sleep=0)

    async def sup_fn(history: Any, tool_choice: Any) -> Any:
        await asyncio.sleep(0)
        return await sup(history, tool_choice)

    wrk = ScriptedAgent("worker", default=forever("supervisor"))

    async def wrk_fn(history: Any, tool_choice: Any) -> Any:
        await asyncio.sleep(0)
        return await wrk(history, tool_choice)

    slow_sup = ScriptedAgent(
        "boss", [[send_request("helper", "go")], [task_complete("b done")]], sleep=0.02
    )
    slow_wrk = ScriptedAgent("helper", [[send_response("boss", "r")]], sleep=0.02)
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup_fn, ["worker"], True),
            "worker": AgentSpec(wrk_fn, ["supervisor"], True),
            "boss": AgentSpec(slow_sup, ["helper"], True, enable_entrypoint=True),
            "helper": AgentSpec(slow_wrk, ["boss"]),
        }
    )
    async with rt.ephemeral_loop(None):
        a = asyncio.ensure_future(
            rt.submit_and_wait(user_message("A", "x"), timeout=30, max_steps=1_000_000)
        )
        b = await asyncio.wait_for(
            rt.submit_and_wait(user_message("B", "y", to="boss"), timeout=30), 10
        )
        assert b["message"]["body"] == "b done"
        assert not a.done()
        assert len(sup.calls) > 3
        stop.set()
        await asyncio.wait_for(a, 10)


async def test_breakpoint_in_a_handed_over_turn_then_resume() -> None:
    async def stop_here(args: dict[str, Any]) -> str:
        return "the action itself ran"

    sup = ScriptedAgent(
        "supervisor", [[send_request("worker", "go")], [task_complete("done")]], sleep=0.001
    )
    wrk = ScriptedAgent(
        "worker",
        [
            [tool_call("stop_here", {"x": 1}, call_id="bp-1")],
            [send_response("supervisor", "r")],
        ],
        sleep=0.001,
    )
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["worker"], True),
            "worker": AgentSpec(wrk, ["supervisor"], actions=["stop_here"]),
        },
        {"stop_here": stop_here},
        breakpoint_tools=["stop_here"],
    )
    first = await run_task(rt)
    assert first["message"]["subject"] == "::breakpoint_tool_call::", first
    [entry] = json.loads(first["message"]["body"])
    resumed = await asyncio.wait_for(
        rt.run_task(
            user_message("t1", ""),
            resume_from="breakpoint_tool_call",
            breakpoint_tool_call_result=json.dumps(
                [{"call_id": entry["call_id"], "content": "25C"}]
            ),
            timeout=5,
        ),
        6,
    )
    assert resumed["message"]["body"] == "done"
    assert wrk.calls[-1].history[-1].get("content") == "25C"
    assert [e.event for e in rt.get_task_events("t1")] == [
        "new_message",
        "tool_call",
        "new_message",
        "tool_call",
        "breakpoint_tool_call",
        "task_complete",
        "breakpoint_action_complete",
        "tool_call",
        "new_message",
        "tool_call",
        "task_complete_call",
        "new_message",
        "task_complete",
    ]
    assert not rt._turns_by_task


async def test_submit_and_wait_without_a_timeout_waits() -> None:
    """v1.3 callers pass timeout=None for no limit (asyncio.timeout(None) on main)."""
    rt, sup, _ = two_agent_runtime([[task_complete("done")]])
    async with rt.ephemeral_loop(None):
        response = await asyncio.wait_for(
            rt.submit_and_wait(user_message("t1"), timeout=None),  # type: ignore[arg-type]
            5,
        )
    assert response["message"]["body"] == "done"


async def test_caller_timeout_answer_and_no_live_timer_left() -> None:
    rt, sup, _ = two_agent_runtime([])
    sup.default = [task_complete("done")]
    sup.sleep = 0.5
    loop = asyncio.get_running_loop()
    async with rt.ephemeral_loop(None):
        response = await rt.submit_and_wait(user_message("t1"), timeout=0.05)
        assert response["message"]["subject"] == "::task_timeout::"
        done = await rt.submit_and_wait(user_message("t2"), timeout=1000)
    assert done["message"]["body"] == "done"
    live = [h for h in loop._scheduled if not h.cancelled() and h.when() > loop.time() + 100]  # type: ignore[attr-defined]
    assert live == []


def test_ids_unique_across_threads() -> None:
    out: list[list[str]] = []

    def make() -> None:
        out.append([new_id() for _ in range(20_000)])

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for chunk in out for i in chunk]
    assert len(set(ids)) == len(ids) == 160_000


def _child_ids(queue: Any) -> None:
    queue.put([new_id() for _ in range(10)])


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_ids_unique_in_child_processes(method: str) -> None:
    new_id()  # the parent has unused bytes in its pool
    parent_pool = list(message_module._ready_ids)
    ctx = multiprocessing.get_context(method)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child_ids, args=(queue,)) for _ in range(3)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
    mine = [new_id() for _ in range(10)]
    ids = [i for chunk in got for i in chunk] + mine
    assert len(set(ids)) == len(ids)
    assert not set(ids[:-10]) & {h for h in parent_pool}


def test_os_fork_child_draws_fresh_ids() -> None:
    new_id()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, ",".join(new_id() for _ in range(5)).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    child = data.decode().split(",")
    parent = [new_id() for _ in range(5)]
    assert not set(child) & set(parent)


def test_timestamp_text_matches_datetime_isoformat() -> None:
    pattern = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$")
    last = None
    for _ in range(50_000):
        text = utc_now_iso()
        assert pattern.match(text), text
        parsed = datetime.datetime.fromisoformat(text)
        assert parsed.tzinfo is not None
        if last is not None:
            assert parsed >= last  # wall clock: holds unless the clock steps back
        last = parsed
    for ns in (0, 999, 1_000, 1_700_000_000_000_000_000, 1_700_000_000_999_999_999):
        expected = datetime.datetime.fromtimestamp(ns // 1000 / 1e6, datetime.UTC)
        mine = message_module.utc_iso(ns)
        micro = ns // 1000
        want = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
            microseconds=micro
        )
        assert mine == want.isoformat(), (ns, mine, want.isoformat(), expected)


async def test_shutdown_while_a_handed_over_turn_waits_on_its_model() -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()
    tasks: list[Any] = []

    async def slow_worker(history: Any, tool_choice: Any) -> Any:
        tasks.append(asyncio.current_task())
        entered.set()
        await gate.wait()
        return None, []

    sup = ScriptedAgent(
        "supervisor", [[send_request("worker", "go")], [task_complete("done")]], sleep=0.001
    )
    rt = make_runtime(
        {
            "supervisor": AgentSpec(sup, ["worker"], True),
            "worker": AgentSpec(slow_worker, ["supervisor"]),
        }
    )
    async with rt.ephemeral_loop(None):
        waiting = asyncio.ensure_future(rt.submit_and_wait(user_message("t1"), timeout=30))
        await asyncio.wait_for(entered.wait(), 5)
        (turn,) = rt._turns_by_task["t1"]
        assert turn is tasks[0]
        await asyncio.wait_for(rt.shutdown(grace_period=0.05), 5)
        response = await asyncio.wait_for(waiting, 5)
    assert response["message"]["subject"] == "::shutdown_requested::", response
    assert turn.cancelled()
    assert not rt._turns


async def test_fan_out_fan_in_of_many_tasks_reaches_the_supervisor_whole() -> None:
    """40 tasks at once: the supervisor asks five workers (model waits of 1-9 ms), waits
    with await_message until all five answered, and completes with the five answers."""
    workers = [f"w{i}" for i in range(5)]

    def sup_step(history: Any, tool_choice: Any) -> list[Any]:
        text = "\n".join(str(h.get("content")) for h in history)
        answers = sorted(set(re.findall(r"<body>(answer from w\d)</body>", text)))
        if len(answers) == len(workers):
            return [task_complete(",".join(answers))]
        if "answer from" in text:
            return [tool_call("await_message", {})]
        return [send_request(w, "go") for w in workers]

    sup = ScriptedAgent("supervisor", default=sup_step, sleep=0.001)
    agents = {"supervisor": AgentSpec(sup, workers, True)}
    for i, w in enumerate(workers):
        agent = ScriptedAgent(
            w, default=[send_response("supervisor", f"answer from {w}")], sleep=0.001 + i * 0.002
        )
        agents[w] = AgentSpec(agent, ["supervisor"])
    rt = make_runtime(agents)
    async with rt.ephemeral_loop(None):
        answers = await asyncio.wait_for(
            asyncio.gather(
                *(rt.submit_and_wait(user_message(f"t{n}"), timeout=60) for n in range(40))
            ),
            90,
        )
    expected = ",".join(f"answer from {w}" for w in workers)
    assert [a["message"]["body"] for a in answers] == [expected] * 40
    await rt.await_idle()
    assert not rt._turns and not rt._turns_by_task
