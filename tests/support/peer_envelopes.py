"""A peer swarm's ``POST /interswarm/forward`` of a new task, as its router sends one (the
quota and durability tests of interswarm deliveries share it)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from server_fixtures import ServerProcess, auth


def request_envelope(
    task_id: str, *, source: str, target: str, owner: str, sender: dict[str, str],
    recipient: str, subject: str, body: str,
) -> dict[str, Any]:  # fmt: skip
    """An interswarm ``request`` envelope from swarm `source` to agent `recipient` of swarm
    `target`, for a task owned by `owner` (`role:id@swarm`), as a peer's router sends one."""
    return {
        "message_id": str(uuid.uuid4()),
        "source_swarm": source,
        "target_swarm": target,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "payload": {
            "task_id": task_id,
            "request_id": str(uuid.uuid4()),
            "sender": sender,
            "recipient": {"address_type": "agent", "address": recipient},
            "subject": subject,
            "body": body,
            "sender_swarm": source,
            "recipient_swarm": target,
            "routing_info": {},
        },
        "msg_type": "request",
        "auth_token": "x",
        "task_owner": owner,
        "task_contributors": [owner],
        "metadata": {},
    }


def forward_new_task(
    server: ServerProcess,
    task_id: str,
    *,
    recipient: str = "supervisor",
    body: str = "hello from gamma",
) -> httpx.Response:
    """``swarm-gamma`` (the key ``server.keys["peer"]``) hands a task of its user to this
    server's `recipient`."""
    envelope = request_envelope(
        task_id,
        source="swarm-gamma",
        target="swarm-alpha",
        owner="user:z@swarm-gamma",
        sender={"address_type": "agent", "address": "supervisor@swarm-gamma"},
        recipient=recipient,
        subject="work",
        body=body,
    )
    return httpx.post(
        f"{server.base_url}/interswarm/forward",
        json={"message": envelope},
        headers=auth(server.keys["peer"]),
        timeout=60,
    )
