"""A peer swarm's ``POST /interswarm/forward`` of a new task, as its router sends one (the
quota and durability tests of interswarm deliveries share it)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from server_fixtures import ServerProcess, auth


def forward_new_task(server: ServerProcess, task_id: str) -> httpx.Response:
    """``swarm-gamma`` (the key ``server.keys["peer"]``) hands a task of its user to this
    server's ``supervisor``."""
    owner = "user:z@swarm-gamma"
    envelope: dict[str, Any] = {
        "message_id": str(uuid.uuid4()),
        "source_swarm": "swarm-gamma",
        "target_swarm": "swarm-alpha",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "payload": {
            "task_id": task_id,
            "request_id": str(uuid.uuid4()),
            "sender": {"address_type": "agent", "address": "supervisor@swarm-gamma"},
            "recipient": {"address_type": "agent", "address": "supervisor"},
            "subject": "work",
            "body": "hello from gamma",
            "sender_swarm": "swarm-gamma",
            "recipient_swarm": "swarm-alpha",
            "routing_info": {},
        },
        "msg_type": "request",
        "auth_token": "x",
        "task_owner": owner,
        "task_contributors": [owner],
        "metadata": {},
    }
    return httpx.post(
        f"{server.base_url}/interswarm/forward",
        json={"message": envelope},
        headers=auth(server.keys["peer"]),
        timeout=60,
    )
