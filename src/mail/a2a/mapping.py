"""Pure translations between A2A messages and MAIL requests, events and answers."""

from __future__ import annotations

import json
import uuid
from typing import Any

# Any contextId that is not a UUID is mapped onto one, stably, inside this namespace.
_CONTEXT_NAMESPACE = uuid.UUID("6b1f3e1c-5a52-4f0e-9d44-2a8f51c0a2a2")

PAUSE_BREAKPOINT = "breakpoint"
PAUSE_REVIEW = "action_review"


def mail_task_id(context_id: str) -> str:
    """The MAIL task id of an A2A context (the id itself when it is a UUID)."""
    try:
        return str(uuid.UUID(context_id))
    except ValueError:
        return str(uuid.uuid5(_CONTEXT_NAMESPACE, context_id))


# Doubles represent every integer up to 2**53 exactly; past that a "whole" double is not the
# integer the sender meant (1e300 would become a 301-digit step limit).
_EXACT_INTS = 2**53


def _number(value: Any) -> Any:
    """A data part's number as ``POST /message`` would have received it.

    A2A data parts carry numbers as doubles (``google.protobuf.Value``): a whole one within
    the exactly representable range becomes an int; anything else stays as it is, for the
    ``/message`` checks to refuse as they refuse it there.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_INTS:
        return int(value)
    return value


def inbound_request(texts: list[str], data: list[Any], task_id: str) -> dict[str, Any]:
    """The ``POST /message`` body these A2A parts stand for, for task ``task_id``.

    Checked afterwards by the same code as ``/message`` bodies
    (``mail.server.bodies.parse_message_request``), so both refuse the same things.
    """
    body: dict[str, Any] = {"body": "\n".join(t for t in texts if t), "task_id": task_id}
    kwargs: dict[str, Any] = {}
    for item in data:
        if not isinstance(item, dict):
            continue
        if "breakpoint_tool_call_result" in item:
            body["resume_from"] = "breakpoint_tool_call"
            kwargs["breakpoint_tool_call_result"] = item["breakpoint_tool_call_result"]
            if "breakpoint_tool_caller" in item:
                kwargs["breakpoint_tool_caller"] = item["breakpoint_tool_caller"]
        if "decisions" in item:
            body["resume_from"] = "action_review"
            kwargs["decisions"] = item["decisions"]
        for key in ("entrypoint", "subject", "multitask_strategy"):
            if key in item:
                body[key] = item[key]
        if "max_steps" in item:
            kwargs["max_steps"] = _number(item["max_steps"])
    if kwargs:
        body["kwargs"] = kwargs
    return body


def event_metadata(name: str, event_id: str | None, data_json: str) -> dict[str, Any]:
    """A MAIL event as the metadata of an A2A ``working`` status update."""
    try:
        data = json.loads(data_json)
    except ValueError:
        data = {"raw": data_json}
    return {"mail_event": {"event": name, "id": event_id, "data": data}}


def pause_payload(kind: str, body: str, task_id: str) -> dict[str, Any]:
    """The data part of an ``input-required`` status: what the task waits for.

    ``kind`` is ``breakpoint`` (``calls``: the paused tool calls, answer with
    ``breakpoint_tool_call_result``) or ``action_review`` (``held``: the held calls, answer
    with ``decisions``).
    """
    try:
        items = json.loads(body)
    except ValueError:
        items = body
    key = "calls" if kind == PAUSE_BREAKPOINT else "held"
    answer = "breakpoint_tool_call_result" if kind == PAUSE_BREAKPOINT else "decisions"
    return {"mail_pause": kind, "mail_task_id": task_id, key: items, "answer_with": answer}
