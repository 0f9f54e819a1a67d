"""The priority mailbox on its own: tiers, FIFO within a tier, stash/load, wake-ups."""

from __future__ import annotations

import asyncio

import pytest

from mail.core import mailbox as mb
from mail.core.message import (
    MAILMessage,
    create_address,
    create_agent_address,
    make_broadcast,
    make_interrupt,
    make_message,
    make_request,
)


def msg(sender_type: str, msg_type: str, task: str = "t", label: str = "") -> MAILMessage:
    sender = create_address("x", sender_type)  # type: ignore[arg-type]
    to = [create_agent_address("a")]
    if msg_type in ("broadcast", "broadcast_complete"):
        payload: object = make_broadcast(task, sender, to, label, "")
    elif msg_type == "interrupt":
        payload = make_interrupt(task, sender, to, label, "")
    else:
        payload = make_request(task, sender, to[0], label, "")
    return make_message(payload, msg_type)


def subjects(box: mb.Mailbox) -> list[str]:
    out = []
    while (m := box.get_nowait()) is not None:
        out.append(m["message"]["subject"])
    return out


@pytest.mark.parametrize(
    ("sender_type", "msg_type", "tier"),
    [
        ("system", "response", mb.PRIORITY_SYSTEM),
        ("system", "broadcast", mb.PRIORITY_SYSTEM),
        ("system", "broadcast_complete", mb.PRIORITY_SYSTEM),
        ("admin", "request", mb.PRIORITY_USER),
        ("admin", "broadcast", mb.PRIORITY_USER),
        ("user", "request", mb.PRIORITY_USER),
        ("agent", "interrupt", mb.PRIORITY_AGENT_INTERRUPT),
        ("agent", "broadcast_complete", mb.PRIORITY_AGENT_INTERRUPT),
        ("agent", "broadcast", mb.PRIORITY_AGENT_BROADCAST),
        ("agent", "request", mb.PRIORITY_AGENT_MESSAGE),
        ("agent", "response", mb.PRIORITY_AGENT_MESSAGE),
        ("agent", "buffered", mb.PRIORITY_AGENT_MESSAGE),
    ],
)
def test_message_priority_tiers(sender_type: str, msg_type: str, tier: int) -> None:
    # Ours: admin shares the user tier (the original put admin at 0, ahead of system) and an
    # agent's unlisted type falls into the last tier.
    assert mb.message_priority(msg(sender_type, msg_type)) == tier


def test_tier_numbers_are_one_to_five_in_protocol_order() -> None:
    assert [
        mb.PRIORITY_SYSTEM,
        mb.PRIORITY_USER,
        mb.PRIORITY_AGENT_INTERRUPT,
        mb.PRIORITY_AGENT_BROADCAST,
        mb.PRIORITY_AGENT_MESSAGE,
    ] == [1, 2, 3, 4, 5]


def test_all_five_tiers_come_out_in_order_regardless_of_insertion_order() -> None:
    box = mb.Mailbox()
    box.put(msg("agent", "request", label="5-request"))
    box.put(msg("agent", "broadcast", label="4-broadcast"))
    box.put(msg("agent", "interrupt", label="3-interrupt"))
    box.put(msg("user", "request", label="2-user"))
    box.put(msg("system", "response", label="1-system"))
    box.put(msg("admin", "request", label="2-admin"))
    box.put(msg("agent", "response", label="5-response"))
    assert subjects(box) == [
        "1-system",
        "2-user",
        "2-admin",
        "3-interrupt",
        "4-broadcast",
        "5-request",
        "5-response",
    ]


def test_fifo_within_one_tier_for_many_messages() -> None:
    box = mb.Mailbox()
    labels = [f"m{i:03d}" for i in range(200)]
    for i, label in enumerate(labels):
        box.put(msg("agent", "request" if i % 2 else "response", label=label))
    assert subjects(box) == labels


def test_explicit_priority_overrides_the_computed_tier() -> None:
    box = mb.Mailbox()
    box.put(msg("system", "response", label="system"))
    box.put(msg("agent", "request", label="forced"), priority=0)
    assert subjects(box) == ["forced", "system"]


def test_len_empty_has_task_and_snapshot() -> None:
    box = mb.Mailbox()
    assert box.empty() and len(box) == 0 and box.get_nowait() is None
    box.put(msg("agent", "request", task="t1", label="b"))
    box.put(msg("system", "response", task="t2", label="a"))
    box.put(msg("agent", "request", task="t1", label="c"))
    assert len(box) == 3 and not box.empty()
    assert box.has_task("t1") and box.has_task("t2") and not box.has_task("t3")
    assert [m["message"]["subject"] for m in box.snapshot()] == ["a", "b", "c"]
    assert len(box) == 3  # snapshot does not consume
    box.get_nowait()
    assert not box.has_task("t2")
    box.get_nowait()
    assert box.has_task("t1")
    box.get_nowait()
    assert not box.has_task("t1") and box.empty()


def test_stash_removes_only_one_task_in_order_and_load_restores_tiers() -> None:
    box = mb.Mailbox()
    box.put(msg("agent", "request", task="t1", label="t1-req-1"))
    box.put(msg("agent", "request", task="t2", label="t2-req"))
    box.put(msg("system", "response", task="t1", label="t1-sys"))
    box.put(msg("agent", "request", task="t1", label="t1-req-2"))
    stashed = box.stash("t1")
    assert [i["message"]["message"]["subject"] for i in stashed] == [
        "t1-sys",
        "t1-req-1",
        "t1-req-2",
    ]
    assert [i["priority"] for i in stashed] == [1, 5, 5]
    assert not box.has_task("t1") and len(box) == 1
    assert box.stash("missing") == []

    box.put(msg("agent", "request", task="t3", label="t3-req"))
    box.load(list(reversed(stashed)))  # load sorts by (priority, seq) itself
    # Reloaded items keep their tier and their order among themselves; they queue behind
    # what is already waiting in the same tier.
    assert subjects(box) == ["t1-sys", "t2-req", "t3-req", "t1-req-1", "t1-req-2"]


async def test_get_waits_for_a_put() -> None:
    box = mb.Mailbox()
    getter = asyncio.create_task(box.get())
    await asyncio.sleep(0.01)
    assert not getter.done()
    box.put(msg("user", "request", label="hello"))
    got = await asyncio.wait_for(getter, 1)
    assert got is not None and got["message"]["subject"] == "hello"


async def test_put_wakeup_makes_a_waiting_get_return_none_once() -> None:
    box = mb.Mailbox()
    getter = asyncio.create_task(box.get())
    await asyncio.sleep(0.01)
    box.put_wakeup()
    assert await asyncio.wait_for(getter, 1) is None
    # The wake-up is consumed: the next get waits for a real message again.
    second = asyncio.create_task(box.get())
    await asyncio.sleep(0.01)
    assert not second.done()
    box.put(msg("user", "request", label="x"))
    assert (await asyncio.wait_for(second, 1))["message"]["subject"] == "x"  # type: ignore[index]


async def test_messages_win_over_a_pending_wakeup() -> None:
    box = mb.Mailbox()
    box.put_wakeup()
    box.put(msg("user", "request", label="first"))
    got = await box.get()
    assert got is not None and got["message"]["subject"] == "first"
    assert await asyncio.wait_for(box.get(), 1) is None


async def test_close_drains_then_raises_and_wakes_waiters() -> None:
    box = mb.Mailbox()
    waiter = asyncio.create_task(box.get())
    await asyncio.sleep(0.01)
    box.close()
    with pytest.raises(mb.MailboxClosed):
        await asyncio.wait_for(waiter, 1)
    assert box.closed

    box2 = mb.Mailbox()
    box2.put(msg("user", "request", label="left"))
    box2.close()
    got = await box2.get()
    assert got is not None and got["message"]["subject"] == "left"
    with pytest.raises(mb.MailboxClosed):
        await box2.get()
