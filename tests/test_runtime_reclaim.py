"""A runtime let go of is freed by reference counting, with every task it kept.

The runtime's components and callbacks hold it weakly (core/runtime_ports.py: HostLink,
weakly), so a dropped swarm is no reference cycle: its memory comes back at once, and the
cyclic collector never has to find (and walk) it. These tests run with the collector
switched off, so only reference counting can free anything.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate
from mail.core.runtime_ports import HostLink, weakly

COMPLETION = {"role": "assistant", "content": None}
DELEGATE = AgentToolCall(
    tool_name="send_request",
    tool_args={"target": "worker", "subject": "job", "body": "do it"},
    tool_call_id="c1",
    completion=COMPLETION,
)
ANSWER = AgentToolCall(
    tool_name="send_response",
    tool_args={"target": "supervisor", "subject": "re: job", "body": "result"},
    tool_call_id="c2",
    completion=COMPLETION,
)
FINISH = AgentToolCall(
    tool_name="task_complete",
    tool_args={"finish_message": "done"},
    tool_call_id="c3",
    completion=COMPLETION,
)


def supervisor_factory(**_: Any) -> Any:
    async def supervisor(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        await asyncio.sleep(0.001)  # a model call that waits: the turn hand-over path
        last = history[-1].get("content") or ""
        return None, [DELEGATE if 'type="user"' in last else FINISH]

    return supervisor


def worker_factory(**_: Any) -> Any:
    async def worker(history: list[dict[str, Any]], tool_choice: Any) -> Any:
        return None, [ANSWER]  # answers at once: the path of new turn tasks

    return worker


def template(team_tools: list[str] | None = None) -> MAILSwarmTemplate:
    return MAILSwarmTemplate(
        name="reclaim",
        version="1.0.0",
        agents=[
            MAILAgentTemplate(
                "supervisor",
                supervisor_factory,
                ["worker"],
                enable_entrypoint=True,
                can_complete_tasks=True,
                team_tools=team_tools,
            ),
            MAILAgentTemplate("worker", worker_factory, ["supervisor"], team_tools=team_tools),
        ],
        actions=[],
        entrypoint="supervisor",
    )


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def mail_objects_in_cycles() -> list[str]:
    """Type names of mail's objects the cyclic collector finds now (and frees)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.garbage
            if type(o).__module__.startswith("mail.")
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


async def _five_answers_then_shutdown(swarm: Any) -> weakref.ref[Any]:
    """Five messages answered on a running loop, then a shutdown: a weak reference to the
    swarm's runtime (the caller drops the swarm)."""
    loop_task = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0)
    results = await asyncio.gather(*(swarm.post_message("go", timeout=30) for _ in range(5)))
    assert [r["message"]["body"] for r, _ in results] == ["done"] * 5
    runtime = weakref.ref(swarm.runtime)
    await swarm.shutdown()
    await loop_task
    return runtime


async def test_a_dropped_swarm_is_freed_without_the_cyclic_collector(collector_off: None) -> None:
    swarm = template().instantiate({}, user_id="u")
    loop_task = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0)
    results = await asyncio.gather(*(swarm.post_message("go", timeout=30) for _ in range(20)))
    assert [r["message"]["body"] for r, _ in results] == ["done"] * 20
    runtime = weakref.ref(swarm.runtime)
    task = weakref.ref(next(iter(swarm.runtime.mail_tasks.values())))
    await swarm.shutdown()
    await loop_task
    del swarm, loop_task, results

    assert runtime() is None, "the runtime is kept alive by a reference cycle"
    assert task() is None, "a task outlived its runtime"
    assert mail_objects_in_cycles() == []


async def test_a_dropped_swarm_with_a_store_is_freed_without_the_cyclic_collector(
    collector_off: None,
) -> None:
    """The store's observer and the task journal hold the runtime weakly too."""
    from mail.store import MemoryTaskStore

    store = MemoryTaskStore()
    await store.start()
    swarm = template().instantiate({}, user_id="u")
    await swarm.attach_store(store)
    assert swarm.runtime.journal is not None  # histories persisted: the journal is on
    runtime = await _five_answers_then_shutdown(swarm)
    del swarm

    assert runtime() is None, "the runtime is kept alive by a reference cycle"
    assert mail_objects_in_cycles() == []


async def test_a_dropped_swarm_with_team_tools_is_freed_without_the_cyclic_collector(
    collector_off: None,
) -> None:
    """The team service holds the runtime weakly too."""
    swarm = template(["reply_wait", "threads", "inbox", "files"]).instantiate({}, user_id="u")
    assert swarm.runtime.team is not None
    runtime = await _five_answers_then_shutdown(swarm)
    del swarm

    assert runtime() is None, "the runtime is kept alive by a reference cycle"
    assert mail_objects_in_cycles() == []


async def test_a_runtime_dropped_while_its_loop_runs_stays_until_the_loop_ends(
    collector_off: None,
) -> None:
    """Held weakly by its components, the runtime is still held by the work it runs."""
    swarm = template().instantiate({}, user_id="u")
    loop_task = asyncio.create_task(swarm.runtime.run_continuous())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(swarm.post_message("go", timeout=30))
    runtime = weakref.ref(swarm.runtime)
    shutdown = swarm.runtime.shutdown
    del swarm
    response, _ = await asyncio.wait_for(waiter, 10)
    assert response["message"]["body"] == "done"
    assert runtime() is not None  # the loop still serves its mailbox
    await shutdown()
    await loop_task
    del shutdown, loop_task, waiter
    assert runtime() is None
    assert mail_objects_in_cycles() == []


def test_a_component_of_a_runtime_that_is_gone_says_so() -> None:
    class Host:
        name = "h"

    class Component(HostLink[Host]):
        def __init__(self, host: Host) -> None:
            self._link(host)

    host = Host()
    component = Component(host)
    name = weakly(host, lambda h: h.name)
    assert component.host is host and name() == "h"
    del host
    with pytest.raises(RuntimeError, match="is gone"):
        component.host  # noqa: B018 - the property is what is tested
    with pytest.raises(RuntimeError, match="is gone"):
        name()
