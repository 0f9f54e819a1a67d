"""The journal of running tasks' pending work (mail.core.runtime_durable), in-memory store.

Enqueue → journaled in the store; a turn's messages leave the journal only when the turn has
finished; restore re-creates the pending work in tier/FIFO order, cuts back the history of an
interrupted turn, drops what it sent, and the task completes by itself once the loop runs.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from mail import AgentToolCall, MAILAgentTemplate, MAILSwarmTemplate
from mail.api.swarm import MAILSwarm
from mail.core.message import (
    create_agent_address,
    create_user_address,
    make_broadcast,
    make_message,
    make_request,
)
from mail.core.runtime_durable import journal_key
from mail.core.system_messages import system_response
from mail.store import MemoryTaskStore
from mail.store.base import InstanceKey

pytestmark = pytest.mark.timeout(30)


def _call(name: str, args: dict[str, Any]) -> AgentToolCall:
    call_id = f"c-{uuid.uuid4().hex[:8]}"
    completion = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
        ],
    }
    return AgentToolCall(
        tool_name=name, tool_args=args, tool_call_id=call_id, completion=completion
    )


class Gate:
    """Worker calls wait here (a model call in flight) until the test opens it."""

    def __init__(self, open_: bool) -> None:
        self.open = asyncio.Event()
        if open_:
            self.open.set()
        self.started: dict[str, asyncio.Event] = {
            "worker1": asyncio.Event(),
            "worker2": asyncio.Event(),
        }
        self.calls: list[str] = []


def _template(name: str, gate: Gate) -> MAILSwarmTemplate:
    def factory(**params: Any):  # noqa: ANN202
        agent_name = params["agent"]

        async def agent(history: list[dict[str, Any]], tool_choice: Any) -> Any:
            gate.calls.append(agent_name)
            incoming = [str(h.get("content", "")) for h in history if h.get("role") == "user"]
            if agent_name != "supervisor":
                gate.started[agent_name].set()
                await gate.open.wait()
                return None, [
                    _call(
                        "send_response",
                        {"target": "supervisor", "subject": "Re", "body": f"done by {agent_name}"},
                    )
                ]
            answers = [t for t in incoming if "done by" in t]
            if len(answers) >= 2:
                return None, [_call("task_complete", {"finish_message": f"{len(answers)} answers"})]
            if answers:
                return None, [_call("await_message", {})]
            return None, [
                _call("send_request", {"target": "worker1", "subject": "w", "body": "part A"}),
                _call("send_request", {"target": "worker2", "subject": "w", "body": "part B"}),
            ]

        return agent

    def agent_template(agent: str, targets: list[str], **kw: Any) -> MAILAgentTemplate:
        return MAILAgentTemplate(agent, factory, targets, agent_params={"agent": agent}, **kw)

    return MAILSwarmTemplate(
        name=name,
        agents=[
            agent_template(
                "supervisor",
                ["worker1", "worker2"],
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            agent_template("worker1", ["supervisor"]),
            agent_template("worker2", ["supervisor"]),
        ],
        actions=[],
        entrypoint="supervisor",
    )


async def _instance(name: str, store: MemoryTaskStore, gate: Gate) -> MAILSwarm:
    swarm = _template(name, gate).instantiate({}, user_id="u")
    await swarm.attach_store(store)
    return swarm


def _crash(swarm: MAILSwarm) -> None:
    """The process is gone: from now on nothing this instance does reaches the store."""
    swarm._store_observer._put = lambda *_a: None  # type: ignore[union-attr,method-assign]
    swarm.runtime.journal._write = lambda *_a: None


async def test_enqueued_messages_are_journaled_and_restored_in_tier_fifo_order() -> None:
    store = MemoryTaskStore()
    await store.start()
    name = f"j-{uuid.uuid4().hex[:6]}"
    a = await _instance(name, store, Gate(True))
    task_id = "t1"
    sup, user = create_agent_address("supervisor"), create_user_address("u")

    def agent_msg(body: str) -> Any:
        return make_message(
            make_request(task_id, sup, create_agent_address("worker1"), "s", body), "request"
        )

    messages = [
        agent_msg("first agent"),
        make_message(make_request(task_id, user, sup, "s", "from user"), "request"),
        agent_msg("second agent"),
        system_response(name, task_id, "supervisor", "::note::", "system"),
        make_message(
            make_broadcast(task_id, sup, [create_agent_address("worker2")], "b", "broadcast"),
            "broadcast",
        ),
    ]
    for message in messages:
        a.runtime.submit(message)
    await asyncio.sleep(0)  # the coalesced journal write
    await a.flush_store()
    snapshot = await store.load_instance(InstanceKey(name, "user", "u"))
    stored = snapshot.queues[journal_key(task_id)]
    assert [i["message"]["id"] for i in stored] == [m["id"] for m in messages]
    assert snapshot.queues.get(task_id) is None  # the stashed-queue row is untouched
    _crash(a)

    b = await _instance(name, store, Gate(True))
    assert b.runtime.journal.replay_pending == [task_id]
    assert b.runtime.mail_tasks[task_id].is_running
    order = [e["message"]["message"]["body"] for e in b.runtime.journal.entries(task_id)]
    assert order == ["system", "from user", "broadcast", "first agent", "second agent"]
    assert b.runtime.mailbox.empty()  # nothing moves before the loop runs
    b.runtime.journal.loop_started()
    assert [m["message"]["body"] for m in b.runtime.mailbox.snapshot()] == order
    # Replayed work is journaled again under its new mailbox positions.
    assert len(b.runtime.journal.entries(task_id)) == 5


async def test_interrupted_turn_is_rerun_and_the_task_completes_after_restore() -> None:
    store = MemoryTaskStore()
    await store.start()
    name = f"j-{uuid.uuid4().hex[:6]}"
    key = InstanceKey(name, "user", "u")
    gate = Gate(False)
    a = await _instance(name, store, gate)
    loop_a = asyncio.create_task(a.run_continuous())
    task_id = "t2"
    a.runtime.submit(a._user_message("fan out", "New Message", "request", None, task_id))
    await asyncio.wait_for(gate.started["worker1"].wait(), 5)
    await asyncio.wait_for(gate.started["worker2"].wait(), 5)
    await asyncio.sleep(0)
    await a.flush_store()

    snapshot = await store.load_instance(key)
    journal = snapshot.queues[journal_key(task_id)]
    # The supervisor's finished turn acked the user message; the workers' turns hold theirs.
    assert sorted((i["kind"], i.get("agent")) for i in journal) == [
        ("inbox", "worker1"),
        ("inbox", "worker2"),
    ]
    assert all(i.get("taken_by") and i["base_len"] == 0 for i in journal)

    # As if the crash came after worker1's history write but before its ack, and after a
    # message it sent was journaled: both must be undone by the restore.
    worker1_turn = next(i["taken_by"] for i in journal if i["agent"] == "worker1")
    incoming = {"role": "user", "content": "<incoming_message>part A</incoming_message>"}
    await store.save_history(key, task_id, "worker1", "completions", [incoming])
    sent = system_response(name, task_id, "supervisor", "Re", "done by worker1 (lost turn)")
    await store.save_queue(
        key,
        journal_key(task_id),
        [
            *journal,
            {"kind": "mailbox", "priority": 5, "seq": 99, "message": sent, "origin": worker1_turn},
        ],
    )
    _crash(a)
    await a.runtime.shutdown(grace_period=0)
    await asyncio.gather(loop_a, return_exceptions=True)
    events_before = len(a.runtime.mail_tasks[task_id].events)

    gate_b = Gate(True)
    b = await _instance(name, store, gate_b)
    task = b.runtime.mail_tasks[task_id]
    assert task.is_running and not task.completed
    assert b.runtime.agent_histories[f"{task_id}::worker1"] == []  # cut back to the turn's start
    loop_b = asyncio.create_task(b.run_continuous())
    try:
        async with asyncio.timeout(10):
            while not task.completed:
                await task.event_signal().wait()
        await b.runtime.await_idle()
        await asyncio.sleep(0)
    finally:
        await b.flush_store()
        await b.shutdown()
        await asyncio.gather(loop_b, return_exceptions=True)

    assert task.response is not None and task.response["message"]["body"] == "2 answers"
    assert sorted(gate_b.calls) == ["supervisor", "worker1", "worker2"]  # only the re-runs
    ids = [int(e.id) for e in task.events]
    assert ids == list(range(1, len(ids) + 1)) and len(ids) > events_before
    assert [e.event for e in task.events if e.event == "task_complete"] == ["task_complete"]
    snapshot = await store.load_instance(key)
    assert journal_key(task_id) not in snapshot.queues
    assert [e["id"] for e in snapshot.events[task_id]] == [str(i) for i in ids]
    for worker in ("worker1", "worker2"):
        history = snapshot.histories[(task_id, worker)]
        assert sum("<incoming_message>" in str(h.get("content")) for h in history) == 1
    supervisor = json.dumps(snapshot.histories[(task_id, "supervisor")])
    assert supervisor.count("done by worker1") == 1  # the dropped send did not arrive


async def test_no_store_means_no_journal() -> None:
    swarm = _template(f"j-{uuid.uuid4().hex[:6]}", Gate(True)).instantiate({}, user_id="u")
    assert swarm.runtime.journal is None
    assert swarm.runtime.mailbox.journal is None and swarm.runtime.inboxes.journal is None
    response, _ = await swarm.post_message(body="go", task_id="t3")
    assert response["message"]["body"] == "2 answers"


async def test_turns_cancelled_by_a_shutdown_run_again_after_restore() -> None:
    store = MemoryTaskStore()
    await store.start()
    name = f"j-{uuid.uuid4().hex[:6]}"
    gate = Gate(False)
    a = await _instance(name, store, gate)
    loop_a = asyncio.create_task(a.run_continuous())
    task_id = "t4"
    a.runtime.submit(a._user_message("fan out", "New Message", "request", None, task_id))
    await asyncio.wait_for(gate.started["worker2"].wait(), 5)
    await asyncio.wait_for(gate.started["worker1"].wait(), 5)
    await a.runtime.shutdown(grace_period=0)  # a redeploy: in-flight turns are cancelled
    await asyncio.gather(loop_a, return_exceptions=True)
    await asyncio.sleep(0)
    await a.flush_store()

    gate_b = Gate(True)
    b = await _instance(name, store, gate_b)
    task = b.runtime.mail_tasks[task_id]
    loop_b = asyncio.create_task(b.run_continuous())
    try:
        async with asyncio.timeout(10):
            while not task.completed:
                await task.event_signal().wait()
    finally:
        await b.shutdown()
        await asyncio.gather(loop_b, return_exceptions=True)
    assert task.response is not None and task.response["message"]["body"] == "2 answers"
    assert sorted(gate_b.calls) == ["supervisor", "worker1", "worker2"]


@pytest.mark.parametrize("claimed", [False, True], ids=["unclaimed", "claimed"])
async def test_a_stream_is_acknowledged_once_the_callers_message_is_committed(
    claimed: bool,
) -> None:
    """`stream_events(on_stored=...)` calls back (a server's first event, an A2A stream's
    Task) only once the task and the caller's message are committed: a kill -9 right then
    loses neither. With a claimed generation (a server that resumed the instance on a shared
    database) the journal is not read at the store's batch but written at the end of the
    loop's pass; the acknowledgement waited for the task's row alone."""
    store = MemoryTaskStore()
    await store.start()
    reader = MemoryTaskStore(share_with=store)  # another process: sees what is committed
    await reader.start()
    name = f"j-{uuid.uuid4().hex[:6]}"
    key = InstanceKey(name, "user", "u")
    if claimed:
        await store.claim_generation(key)
    a = await _instance(name, store, Gate(False))
    task_id, body = "t-ack", "the caller's message"
    committed: list[Any] = []

    async def stored() -> None:
        committed.append(await reader.load_instance(key))

    events = a.stream_events(body, task_id=task_id, on_stored=stored)
    await anext(events)
    await events.aclose()
    (snapshot,) = committed
    assert task_id in snapshot.tasks
    kept = json.dumps([snapshot.queues.get(journal_key(task_id)), snapshot.events.get(task_id)])
    assert body in kept
    await a.runtime.shutdown(grace_period=0)
    await reader.close()
    await store.close()
