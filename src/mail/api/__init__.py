"""The Python API: actions, agent templates, swarm templates and running swarms."""

from mail.api.actions import MAILAction, action
from mail.api.agents import MAILAgent, MAILAgentTemplate
from mail.api.swarm import MAILSwarm
from mail.api.swarm_template import MAILSwarmTemplate

__all__ = [
    "MAILAction",
    "MAILAgent",
    "MAILAgentTemplate",
    "MAILSwarm",
    "MAILSwarmTemplate",
    "action",
]
