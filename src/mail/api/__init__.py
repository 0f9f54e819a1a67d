"""The Python API: actions, agent templates, swarm templates and running swarms."""

from mail.api.actions import MAILAction, action
from mail.api.agents import MAILAgent, MAILAgentTemplate
from mail.api.swarm import MAILSwarm
from mail.api.swarm_template import MAILSwarmTemplate

# v1.3's mail.api module held the runtime class too (a swarm's runtime is `swarm.runtime`).
from mail.core.runtime import MAILRuntime  # noqa: F401

__all__ = [
    "MAILAction",
    "MAILAgent",
    "MAILAgentTemplate",
    "MAILSwarm",
    "MAILSwarmTemplate",
    "action",
]
