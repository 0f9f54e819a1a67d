"""Interswarm routes (``/interswarm/forward``, ``/interswarm/back``, ``/interswarm/message``).

This router is mounted by the app already; the routes themselves arrive with interswarm support.
Remote swarms authenticate with the ``agent`` role (``auth.caller_agent``) and get ``swarm``
instances from ``state.instances`` (``instance_kind("agent") == "swarm"``).
"""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
