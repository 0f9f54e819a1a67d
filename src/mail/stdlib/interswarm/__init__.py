"""Probes of remote MAIL servers (guarded like the http actions)."""

from mail.stdlib.interswarm.actions import get_swarm_health, get_swarm_registry, ping_swarm

__all__ = ["get_swarm_health", "get_swarm_registry", "ping_swarm"]
