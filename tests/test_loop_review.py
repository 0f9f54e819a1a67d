"""Loop lifecycle interleavings found in review: cancellations and stops around a hand-over
between a temporary loop (run_task / streams) and a continuous loop, and the idle reaper."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mail import MAILSwarm
from support.relay_swarm import relay_swarm


def _swarm(latency: float) -> MAILSwarm:
    return relay_swarm(latency, "review")


@pytest.mark.timeout(30)
async def test_a_call_cancelled_as_it_starts_a_temporary_loop_does_not_leave_it_running() -> None:
    # ephemeral_loop counted the user and started the loop, then awaited sleep(0) outside its
    # try/finally: a cancellation landing there left the count at 1 for ever, so the temporary
    # loop never stopped and a later run_continuous waited on it (and spun after shutdown).
    swarm = _swarm(0.0)
    rt = swarm.runtime
    call = asyncio.create_task(swarm.post_message("doomed", timeout=5))
    await asyncio.sleep(0)  # the call has started the temporary loop and yields once
    assert rt._ephemeral_task is not None
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(10):
        await asyncio.sleep(0)
    assert rt._ephemeral_users == 0 and rt._ephemeral_task is None and not rt._loop_running
    loop = asyncio.create_task(swarm.run_continuous())
    try:
        response, _ = await asyncio.wait_for(swarm.post_message("after", timeout=5), 5)
        assert response["message"]["body"] == "answer: AFTER"
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(loop, 5)


@pytest.mark.timeout(30)
async def test_cancelling_run_continuous_during_a_hand_over_strands_no_call() -> None:
    # A call on a temporary loop; run_continuous claims the mailbox and waits for that loop;
    # a second call sees the claim and only queues its message; run_continuous is cancelled
    # before it served. The temporary loop ends with the first call, and nothing served the
    # second call's later steps: it waited for its full timeout.
    swarm = _swarm(0.02)
    first = asyncio.create_task(swarm.post_message("first", timeout=10))
    await asyncio.sleep(0.03)  # the first call's task is under way on its temporary loop
    loop = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0)  # run_continuous has claimed the mailbox and waits
    second = asyncio.create_task(swarm.post_message("second", timeout=10))
    await asyncio.sleep(0)  # the second call has queued its message
    loop.cancel()
    try:
        (a, _), (b, _) = await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert a["message"]["body"] == "answer: FIRST"
        assert b["message"]["body"] == "answer: SECOND"
    finally:
        await swarm.shutdown()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(loop, 5)


@pytest.mark.timeout(30)
async def test_shutdown_ends_a_run_continuous_waiting_behind_an_abandoned_stream() -> None:
    # A stream holds a temporary loop; its consumer stops reading (keeps the generator, never
    # closes it). run_continuous waits for that loop. shutdown() ends the temporary loop, but
    # its user never leaves: run_continuous looped on asyncio.wait({finished task}) for ever.
    swarm = _swarm(0.0)
    stream = swarm.stream_events("streamed", timeout=5, ping_interval=60)
    first = await asyncio.wait_for(stream.__anext__(), 5)
    assert first.event != "task_complete"
    loop = asyncio.create_task(swarm.run_continuous())
    await asyncio.sleep(0.01)
    try:
        await swarm.shutdown()
        await asyncio.wait_for(asyncio.shield(loop), 5)
    finally:
        await stream.aclose()
        await asyncio.wait_for(loop, 5)


class _FakeSwarm:
    """An instance's swarm whose shutdown takes a while (e.g. a store flushing)."""

    def __init__(self, release: asyncio.Event | None = None) -> None:
        self.release = release
        self.stopping = asyncio.Event()
        self.stopped = asyncio.Event()
        self.down = False

    async def shutdown(self) -> None:
        self.stopping.set()
        if self.release is not None:
            await self.release.wait()
        self.down = True
        self.stopped.set()

    def get_all_tasks(self) -> dict[str, Any]:
        return {}


@pytest.mark.timeout(30)
async def test_reclaim_spares_an_instance_leased_while_the_round_stopped_another() -> None:
    # reclaim_idle listed its victims once, then stopped them one after the other. A caller
    # whose instance was listed but leased while an earlier victim was stopping (its store
    # flushing, say) had its instance shut down under its request.
    from support.bare_instances import add_instance, bare_manager

    manager = bare_manager(idle_timeout=1.0)
    release = asyncio.Event()
    slow, busy = _FakeSwarm(release), _FakeSwarm()
    instances = []
    for ident, swarm in (("a", slow), ("b", busy)):
        instances.append(add_instance(manager, ident, swarm))
    reclaim = asyncio.create_task(manager.reclaim_idle())
    await asyncio.wait_for(slow.stopping.wait(), 5)  # stopping "a"; "b" is listed next
    got = await manager.get("user", "b", "key")  # a request for "b" arrives meanwhile
    assert got is instances[1]
    async with manager.lease(got):
        release.set()
        reclaimed = await asyncio.wait_for(reclaim, 5)
        assert not busy.down, "the leased instance was shut down under its request"
        assert manager.peek("user", "b") is got
    assert reclaimed == [("user", "a")]
    busy.stopped.set()


@pytest.mark.timeout(30)
async def test_a_call_after_a_manual_continuous_loop_ended_is_served() -> None:
    # run_continuous(mode="manual") left `mode` set when it ended: the next call's temporary
    # loop buffered every agent message for a manual_step that never came (timed out).
    swarm = _swarm(0.0)
    loop = asyncio.create_task(swarm.run_continuous(mode="manual"))
    await asyncio.sleep(0.01)
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
    try:
        response, _ = await asyncio.wait_for(swarm.post_message("later", timeout=3), 5)
        assert response["message"]["body"] == "answer: LATER"
    finally:
        await swarm.shutdown()
