"""Messages the runtime itself sends (`::subject::` conventions). Pure constructors."""

from __future__ import annotations

from mail.core.message import (
    MAILMessage,
    create_agent_address,
    create_system_address,
    make_broadcast,
    make_message,
    make_request,
)


def system_response(
    swarm: str, task_id: str, recipient: str, subject: str, body: str
) -> MAILMessage:
    """A system MAILResponse to one agent (the task continues)."""
    payload = make_request(
        task_id,
        create_system_address(swarm),
        create_agent_address(recipient),
        subject,
        body,
        sender_swarm=swarm,
        recipient_swarm=swarm,
    )
    return make_message(payload, "response")


def system_broadcast(
    swarm: str,
    task_id: str,
    recipients: list[str],
    subject: str,
    body: str,
    msg_type: str = "broadcast",
) -> MAILMessage:
    """A system MAILBroadcast to some agents (the task continues)."""
    payload = make_broadcast(
        task_id,
        create_system_address(swarm),
        [create_agent_address(r) for r in recipients],
        subject,
        body,
        sender_swarm=swarm,
        recipient_swarms=[swarm],
    )
    return make_message(payload, msg_type)


def system_task_end(swarm: str, task_id: str, subject: str, body: str) -> MAILMessage:
    """A system broadcast_complete: ends the task with `body` as its response."""
    return system_broadcast(swarm, task_id, ["all"], subject, body, "broadcast_complete")


def improper_response_to_user_body(user_id: str) -> str:
    return (
        f"The user ('{user_id}') cannot be messaged directly and cannot reply to you. "
        "If you have the final answer, call `task_complete` with it; otherwise keep working "
        "with the agents you can reach."
    )


def unknown_agent_body(name: str, targets: list[str]) -> str:
    reachable = ", ".join(targets) if targets else "(none)"
    return (
        f"There is no agent called '{name}' in this swarm, so your message was not delivered. "
        f"Agents you can send requests and responses to: {reachable}."
    )


def invalid_recipient_body(names: list[str], targets: list[str]) -> str:
    reachable = ", ".join(targets) if targets else "(none)"
    return (
        f"You are not allowed to message {', '.join(names)}; the message was not delivered. "
        f"Agents you can reach: {reachable}."
    )


def swarm_name_recipient_body(name: str) -> str:
    return (
        f"'{name}' is the name of this swarm, not an agent. A message addressed to the swarm "
        "itself is a system-to-system message, which ends the task."
    )


def max_steps_body(transcript: str) -> str:
    return (
        "This task has reached its maximum number of steps. Call `task_complete` now with the "
        "best answer you can give from what has happened so far.\n\n"
        f"Here is what happened:\n\n{transcript}"
    )


def task_timeout_body() -> str:
    return "The task timed out."


def withdrawn_body() -> str:
    return (
        "The message was withdrawn: its timeout passed while it waited behind the task's "
        "current work (multitask_strategy 'enqueue'); it never went in, and the task's own "
        "work goes on."
    )


def task_error_body(error: object) -> str:
    return f"The task encountered an error: {error}."
