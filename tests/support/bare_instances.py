"""An InstanceManager with no swarm factory, holding hand-made instances (reaper tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from mail.server.instances import Instance, InstanceManager


def bare_manager(idle_timeout: float) -> InstanceManager:
    """A manager that builds no swarm itself; instances are put in with `add_instance`."""
    return InstanceManager(
        lambda: None,
        swarm_name="s",
        base_url="http://localhost",
        registry_file=None,
        print_llm_streams=False,
        task_message_limit=None,
        idle_timeout=idle_timeout,
    )


def add_instance(manager: InstanceManager, ident: str, swarm: Any) -> Instance:
    """A user instance of `swarm`, last used long ago, whose loop ends when `swarm.stopped` is set."""
    loop_task = asyncio.create_task(swarm.stopped.wait())
    inst = Instance("user", ident, swarm, loop_task, "key", last_used=0.0)
    manager._instances[inst.key] = inst
    return inst
