"""What a MAILSwarm instance is wired with: its review policy, files listed on a user's
message, and the interswarm bridge (also used by `MAILRuntime.start_interswarm`)."""

from __future__ import annotations

import importlib
from typing import Any

from mail.api.actions import MAILAction
from mail.api.agents import MAILAgent
from mail.core.message import MAILMessage
from mail.core.review import ReviewPolicy, build_policy
from mail.core.runtime import MAILRuntime

# The HTTP client of agent-driven discovery: the stdlib's guarded one. The stdlib builds on
# this package (its actions are MAILActions), so it is looked up by name, not imported.
DISCOVERY_HTTP = "mail.stdlib.peer_http:GuardedPeerHttp"


def _discovery_http() -> Any:
    module, _, name = DISCOVERY_HTTP.partition(":")
    return getattr(importlib.import_module(module), name)()


def review_policy_for(
    agents: list[MAILAgent], actions: list[MAILAction], ignore_ends_task: bool = True
) -> ReviewPolicy:
    """Which calls each agent must have reviewed (actions' `review` + agent overrides)."""
    all_actions = {a.name: a for a in actions}
    for agent in agents:
        for act in agent.actions:
            all_actions.setdefault(act.name, act)
    return build_policy(
        action_defaults={name: act.review for name, act in all_actions.items()},
        agent_actions={a.name: [act.name for act in a.actions] for a in agents},
        agent_overrides={a.name: a.review_actions for a in agents},
        memory_agents=[
            a.name
            for a in agents
            if a.agent_params.get("memory") or getattr(a.function, "memory", False) is True
        ],
        ignore_ends_task=ignore_ends_task,
        descriptions={name: act.description for name, act in all_actions.items()},
        parameters={name: act.parameters for name, act in all_actions.items()},
    )


def attach_files(message: MAILMessage, attachments: list[dict[str, Any]] | None) -> None:
    """List uploaded files (`{id, filename, size, sha256, description}`) on a user message.

    They go in `routing_info.attachments` and, so that the agent knows of them, in a note
    at the end of the body.
    """
    if not attachments:
        return
    payload: Any = message["message"]
    payload["routing_info"] = {**(payload.get("routing_info") or {}), "attachments": attachments}
    lines = [
        f"- {a['filename']} (attachment id {a['id']}, {a['size']} bytes)"
        + (f": {a['description']}" if a.get("description") else "")
        for a in attachments
    ]
    payload["body"] = (
        f"{payload['body']}\n\nAttached files (use read_attachment or save_attachment):\n"
        + "\n".join(lines)
    )


async def connect_interswarm(runtime: MAILRuntime, swarm_registry: Any, router: Any = None) -> None:
    """Connect `runtime` to other swarms through `router` (or one of its own on
    `swarm_registry`): `MAILSwarm.start_interswarm` and `MAILRuntime.start_interswarm`."""
    from mail.net.bridge import InterswarmBridge
    from mail.net.router import InterswarmRouter

    owns = router is None
    if router is None:
        if swarm_registry is None:
            raise RuntimeError("interswarm needs a swarm registry")
        router = InterswarmRouter(swarm_registry, runtime.swarm_name)
    bridge = InterswarmBridge(runtime, router, owns_router=owns)
    # Agent-driven discovery: guarded like the stdlib http actions, this instance only.
    from mail.net.discovery import DiscoveredSwarms

    registry = router.swarm_registry
    bridge.discovery = DiscoveredSwarms(
        _discovery_http(),
        runtime.swarm_name,
        lambda name: registry.get_swarm_endpoint(name) is not None,
    )
    await bridge.start()
    runtime.interswarm = bridge
