"""Webhook event types, which task events they come from, and their payloads (pure)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from mail.core.tasks import TaskState, state_for_answer
from mail.store.base import to_json

TASK_COMPLETED = "task.completed"
TASK_FAILED = "task.failed"
TASK_CANCELLED = "task.cancelled"
TASK_PAUSED_BREAKPOINT = "task.paused.breakpoint"
TASK_PAUSED_REVIEW = "task.paused.review"
TASK_PAUSED_BUDGET = "task.paused.budget"
REVIEW_DECIDED = "task.review.decided"
MULTITASK = "task.multitask"
PEER_UNREACHABLE = "interswarm.peer_unreachable"
PING = "webhook.ping"

# Every type a subscription can ask for (besides the patterns "*" and "<prefix>.*").
EVENT_TYPES: tuple[str, ...] = (
    TASK_COMPLETED,
    TASK_FAILED,
    TASK_CANCELLED,
    TASK_PAUSED_BREAKPOINT,
    TASK_PAUSED_REVIEW,
    TASK_PAUSED_BUDGET,
    REVIEW_DECIDED,
    MULTITASK,
    PEER_UNREACHABLE,
)

# The state a task's answer leaves it in (`state_for_answer`) -> the event; a completion
# otherwise, a cancelled task's answer aside.
_STATE_TYPES: dict[TaskState, str] = {
    TaskState.FAILED: TASK_FAILED,
    TaskState.WAITING_FOR_BREAKPOINT: TASK_PAUSED_BREAKPOINT,
    TaskState.WAITING_FOR_REVIEW: TASK_PAUSED_REVIEW,
    TaskState.WAITING_FOR_BUDGET: TASK_PAUSED_BUDGET,
}
_CANCELLED_SUBJECT = "::task_cancelled::"

# Task events pushed as they happen (name -> type).
_EVENT_TYPES: dict[str, str] = {
    "action_review_decision": REVIEW_DECIDED,
    "multitask_strategy": MULTITASK,
    "interswarm_message_error": PEER_UNREACHABLE,
}

# What of an event's extra_data goes into the payload's `detail`.
_DETAIL_KEYS: dict[str, tuple[str, ...]] = {
    REVIEW_DECIDED: ("tool_call_id", "caller", "action", "type"),
    MULTITASK: ("strategy", "action", "message_id", "position", "cancelled_turns"),
    PEER_UNREACHABLE: ("target_swarm",),
}


def valid_pattern(pattern: str) -> bool:
    """An event type, ``*``, or ``<prefix>.*`` matching at least one type."""
    if pattern == "*" or pattern in EVENT_TYPES:
        return True
    if pattern.endswith(".*"):
        return any(t.startswith(pattern[:-1]) for t in EVENT_TYPES)
    return False


def answer_type(subject: str | None) -> str:
    if subject == _CANCELLED_SUBJECT:
        return TASK_CANCELLED
    return _STATE_TYPES.get(state_for_answer(subject), TASK_COMPLETED)


def event_type_of(name: str | None) -> str | None:
    """The webhook type of a task event, None for events that are not pushed."""
    return _EVENT_TYPES.get(name or "")


def iso_time(seconds: float) -> str:
    """ISO 8601 UTC with a Z, microseconds kept."""
    stamp = _dt.datetime.fromtimestamp(seconds, _dt.UTC).isoformat()
    return stamp.replace("+00:00", "Z")


def cut(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def payload(
    event_type: str,
    *,
    event_id: str,
    occurred_at: float,
    task_id: str | None,
    caller: tuple[str, str] | None,
    swarm: str,
    summary: str,
    summary_chars: int,
    state: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> str:
    """The JSON body of one webhook event (the same bytes for every attempt)."""
    text, truncated = cut(summary, summary_chars)
    data: dict[str, Any] = {
        "event_id": event_id,
        "task_id": task_id,
        "caller": {"role": caller[0], "id": caller[1]} if caller else None,
        "swarm": swarm,
        "state": state,
        "summary": text,
        "summary_truncated": truncated,
        "detail": dict(detail or {}),
    }
    return to_json({"type": event_type, "timestamp": iso_time(occurred_at), "data": data})


def answer_detail(response: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(type, summary, detail) of a task's answer (a MAILMessage)."""
    message = response.get("message") or {}
    subject = str(message.get("subject") or "")
    body = message.get("body")
    return answer_type(subject), "" if body is None else str(body), {"subject": subject}


def event_detail(event_type: str, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    extra = extra or {}
    return {k: extra[k] for k in _DETAIL_KEYS.get(event_type, ()) if k in extra}
