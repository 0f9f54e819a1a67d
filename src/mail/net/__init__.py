"""Interswarm networking: the swarm registry and the HTTP router between swarms."""

from mail.net.registry import SwarmRegistry
from mail.net.router import InterswarmRouter
from mail.net.types import InterswarmError, SwarmEndpoint, SwarmEndpointCleaned

__all__ = [
    "InterswarmError",
    "InterswarmRouter",
    "SwarmEndpoint",
    "SwarmEndpointCleaned",
    "SwarmRegistry",
]
