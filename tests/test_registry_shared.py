"""SwarmRegistry with ``shared=True``: several registries (processes) on one file.

Two registry objects on one file stand for two processes of a cluster deployment (a front end
and another front end or an instance host): each must see the other's changes at its next
read, a change must start from the file's current content (no lost update), and volatile
entries travel through the file too.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests import test_registry as base

from mail.net import SwarmRegistry
from mail.net.registry_store import locked

# The single-process registry tests' fixtures: registries on one file, fake remote swarms.
registry_file = base.registry_file
registries = base.registries
remotes = base.remotes
_no_token_env = base._no_token_env
read_file = base.read_file

pytestmark = pytest.mark.timeout(30)


async def test_a_registration_in_one_process_is_seen_by_the_other(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    gamma = await remotes("swarm-gamma", public=False)
    one, two = registries(shared=True), registries(shared=True)
    await one.register_swarm("swarm-beta", beta.url, volatile=False)
    await one.register_swarm("swarm-gamma", gamma.url, volatile=True, caller_id="gamma-agent")
    assert two.get_swarm_endpoint("swarm-beta") is not None
    gamma_seen = two.get_swarm_endpoint("swarm-gamma")
    assert gamma_seen is not None and gamma_seen["volatile"] is True
    assert two.expected_caller_id("swarm-gamma") == "gamma-agent"
    assert {e["swarm_name"] for e in two.get_public_endpoints_cleaned()} == {"swarm-beta"}
    assert read_file(registry_file)["endpoints"]["swarm-gamma"]["volatile"] is True

    assert two.unregister_swarm("swarm-gamma") is True
    assert one.get_swarm_endpoint("swarm-gamma") is None
    assert set(one.get_all_endpoints()) == {"swarm-alpha", "swarm-beta"}


async def test_changes_start_from_the_file_so_none_is_lost(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta, gamma = await remotes("swarm-beta"), await remotes("swarm-gamma")
    one, two = registries(shared=True), registries(shared=True)
    # Each registers without reading first: the second write must keep the first one's entry.
    await one.register_swarm("swarm-beta", beta.url, volatile=False)
    await two.register_swarm("swarm-gamma", gamma.url, volatile=True)
    third = registries(shared=True)
    assert {"swarm-beta", "swarm-gamma"} <= set(third.get_all_endpoints())
    assert {"swarm-beta", "swarm-gamma"} <= set(one.get_all_endpoints())


async def test_shutdown_of_one_process_keeps_volatile_entries_and_health_is_per_process(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any], registry_file: Path
) -> None:
    beta = await remotes("swarm-beta")
    one, two = registries(shared=True), registries(shared=True)
    await one.register_swarm("swarm-beta", beta.url, volatile=True)
    assert one.cleanup_volatile_endpoints() == []
    assert two.get_swarm_endpoint("swarm-beta") is not None
    two.mark_unreachable("swarm-beta", "test")
    # Another process edits the entry: it is re-read, with this process's health view kept.
    data = json.loads(registry_file.read_text())
    data["endpoints"]["swarm-beta"]["metadata"] = {"edited": True}
    registry_file.write_text(json.dumps(data))
    seen = two.get_swarm_endpoint("swarm-beta")
    assert seen is not None and seen["metadata"] == {"edited": True}
    assert seen["is_active"] is False


async def test_unshared_registry_keeps_its_memory(
    registries: Callable[..., SwarmRegistry], remotes: Callable[..., Any]
) -> None:
    beta = await remotes("swarm-beta")
    one, two = registries(), registries()
    await one.register_swarm("swarm-beta", beta.url, volatile=False)
    assert two.get_swarm_endpoint("swarm-beta") is None  # read at start only, as before


def _hold_lock(path: str, held: Any, release: Any) -> None:
    with locked(Path(path)):
        held.set()
        release.wait(10)


def test_the_lock_excludes_other_processes(tmp_path: Path) -> None:
    target = tmp_path / "registry.json"
    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_lock, args=(str(target), held, release))
    child.start()
    try:
        assert held.wait(10)
        import fcntl
        import os

        fd = os.open(f"{target}.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            release.set()
            child.join(10)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the holder is done
        finally:
            os.close(fd)
    finally:
        release.set()
        child.join(10)
