"""What the bridge checks on an envelope arriving from another swarm, before it is accepted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mail.core.message import ALL_AGENTS, MAILInterswarmMessage, MAILMessage, parse_agent_address
from mail.net.trust import task_end_effect


class LocalSwarm(Protocol):
    """What these checks read of the runtime receiving the envelope."""

    @property
    def swarm_name(self) -> str: ...
    @property
    def entrypoint(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def this_owner(self) -> str: ...
    @property
    def agents(self) -> Mapping[str, Any]: ...
    def _is_local_swarm(self, swarm: str | None) -> bool: ...


def swarm_target_problem(rt: LocalSwarm, payload: Any) -> str | None:
    """A peer's message addressed to this swarm's name (not an agent of it)."""
    recipients = payload.get("recipients") or [payload.get("recipient")]
    for recipient in recipients:
        if not isinstance(recipient, dict):
            continue
        name, swarm = parse_agent_address(str(recipient.get("address", "")))
        if rt._is_local_swarm(swarm) and name == rt.swarm_name and name not in rt.agents:
            return (
                f"'{name}' is the name of swarm '{rt.swarm_name}', not one of its "
                "agents: a message from another swarm must name an agent"
            )
    return None


def user_target_problem(rt: LocalSwarm, payload: Any) -> str | None:
    """Why a user's (or admin's) message from another swarm cannot go where it is sent."""
    sender = payload["sender"]
    if sender["address_type"] not in ("user", "admin"):
        return None
    entrypoints = sorted(
        name
        for name, agent in rt.agents.items()
        if getattr(agent, "enable_entrypoint", False) or name == rt.entrypoint
    )
    recipients = payload.get("recipients") or [payload.get("recipient")]
    for recipient in recipients:
        if not recipient:
            continue
        name, _ = parse_agent_address(recipient["address"])
        if name == ALL_AGENTS or name in entrypoints:
            continue
        what = "is not an entrypoint" if name in rt.agents else "is not an agent"
        return (
            f"'{name}' {what} of swarm '{rt.swarm_name}': a user's message from another "
            f"swarm may only go to its entrypoint agents ({', '.join(entrypoints)})"
        )
    return None


def task_end(rt: LocalSwarm, payload: Any, source: str, owner: str, direct: bool) -> str:
    """`end` or `deliver` for a peer's task-end notice (net/trust.py decides); `direct`:
    our user or admin sent the task to `source` directly."""
    recipients = payload.get("recipients") or [payload.get("recipient")]
    to_agent = to_caller = False
    for recipient in recipients:
        if not isinstance(recipient, dict):
            continue
        name, swarm = parse_agent_address(str(recipient.get("address", "")))
        if not rt._is_local_swarm(swarm):
            continue
        to_agent = to_agent or name in rt.agents
        to_caller = to_caller or name == rt.user_id
    return task_end_effect(
        source_swarm=source,
        task_id=payload["task_id"],
        task_owner=owner,
        owned_here=owner == rt.this_owner,
        to_local_agent=to_agent,
        to_direct_caller=to_caller and direct,
    )


def already_received(journal: Any, task: Any, message_id: str) -> bool:
    """Whether the task holds the envelope `message_id` already: still pending (queued, or in
    an agent's inbox: the durable journal, `journal` None without a store) or handed to an
    agent (its ``new_message`` event carries the message). This survives a restart, where
    the bridge's memory of ids it saw does not: a peer's retry of a delivery whose answer
    a crash cut off (the key taken over, the route run again) then changes nothing."""
    if journal is not None:
        for entry in journal.entries(task.task_id):
            message = entry.get("message")
            if isinstance(message, dict) and message.get("id") == message_id:
                return True
    for event in reversed(task.events):
        if event.event != "new_message":
            continue
        message = event.extra_data.get("full_message")
        if isinstance(message, dict) and message.get("id") == message_id:
            return True
    return False


def as_message(envelope: MAILInterswarmMessage) -> MAILMessage:
    return {
        "id": envelope["message_id"],
        "timestamp": envelope["timestamp"],
        "message": envelope["payload"],
        "msg_type": envelope["msg_type"],
    }
