"""Attacks on the runtime's weak links (core/runtime_ports.py: HostLink, weakly) from the API.

The components and callbacks hold the runtime weakly; what a user could do with a swarm
before must keep working: a copy of a swarm is a swarm of its own.
"""

from __future__ import annotations

import copy
import gc
import logging
import weakref
from pathlib import Path

import pytest
from tests.test_runtime_reclaim import template

from mail.net import InterswarmRouter, SwarmRegistry


async def test_a_deep_copy_of_a_swarm_runs_on_its_own_runtime() -> None:
    """`copy.deepcopy(swarm)` made a swarm whose components (weak links, copied as they
    are) still served the original runtime: the copy's tasks landed in the original, and
    once the original was dropped the copy raised "the runtime ... is gone"."""
    original = template().instantiate({}, user_id="u")
    clone = copy.deepcopy(original)
    assert clone.runtime is not original.runtime
    response, _ = await clone.post_message("go", timeout=10)
    assert response["message"]["body"] == "done"
    assert len(clone.runtime.mail_tasks) == 1
    assert original.runtime.mail_tasks == {}  # nothing of the copy's task in the original

    del original
    gc.collect()
    response, _ = await clone.post_message("go", timeout=10)
    assert response["message"]["body"] == "done"
    assert len(clone.runtime.mail_tasks) == 2


async def test_a_deep_copy_of_a_swarm_with_team_tools_has_its_own_team_service() -> None:
    """The team service holds its runtime weakly too: the copy's serves the copy."""
    original = template(["reply_wait", "threads", "inbox", "files"]).instantiate({}, user_id="u")
    clone = copy.deepcopy(original)
    assert clone.runtime.team is not original.runtime.team
    assert clone.runtime.team.rt is clone.runtime
    del original
    gc.collect()
    response, _ = await clone.post_message("go", timeout=10)
    assert response["message"]["body"] == "done"


async def test_a_stream_and_a_loop_block_kept_of_a_dropped_swarm_still_run() -> None:
    """The v1.3 shape: `runtime.submit_and_stream(message)` and `runtime.ephemeral_loop()`
    made, the swarm let go of, then both used. Each is a component's generator, which took
    the runtime from its weak link only when it began: the runtime was gone by then."""
    swarm = template().instantiate({}, user_id="u")
    message = swarm.build_message("job", "go", ["supervisor"])
    block = swarm.runtime.ephemeral_loop()
    stream = swarm.runtime.submit_and_stream(message)
    runtime = weakref.ref(swarm.runtime)
    del swarm
    gc.collect()
    async with block:
        events = [event async for event in stream]
    assert events[-1].event == "task_complete"
    assert events[-1].data["response"] == "done"
    del block, stream, events
    gc.collect()
    assert runtime() is None  # freed once the caller let go of both


async def test_a_swarm_with_interswarm_is_freed_by_reference_counting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The interswarm bridge held its runtime strongly (runtime.interswarm <-> bridge.runtime:
    a cycle, so a shut-down swarm with interswarm waited for the cyclic collector), and a
    swarm dropped without shutdown stayed forever in the shared registry's down listeners."""
    registry = SwarmRegistry("reclaim", "http://127.0.0.1:1", str(tmp_path / "reg.json"))
    router = InterswarmRouter(registry, "reclaim")
    await router.start()
    try:
        swarm = template().instantiate({}, user_id="u")
        swarm.enable_interswarm = True
        swarm.swarm_registry = registry
        await swarm.start_interswarm(router)
        response, _ = await swarm.post_message("go", timeout=10)
        assert response["message"]["body"] == "done"
        runtime = weakref.ref(swarm.runtime)
        await swarm.shutdown()
        gc.collect()
        gc.disable()
        try:
            del swarm, response
            assert runtime() is None, "kept alive by a reference cycle"
        finally:
            gc.enable()

        # Dropped without shutdown: the registry keeps no runtime, and tells the others.
        dropped = template().instantiate({}, user_id="u")
        dropped.enable_interswarm = True
        dropped.swarm_registry = registry
        await dropped.start_interswarm(router)
        runtime = weakref.ref(dropped.runtime)
        del dropped
        gc.collect()
        assert runtime() is None, "the registry's down listener keeps the runtime"
        with caplog.at_level(logging.ERROR, logger="mail"):
            registry._notify_down("other", "test")  # what mark_unreachable tells listeners
        assert [r.getMessage() for r in caplog.records] == []  # no "listener failed"
        assert registry._down_listeners == []  # the gone swarm's listener let itself go
    finally:
        await router.stop()
        await registry.aclose()
