"""Pure translations between A2A messages and MAIL requests, events and answers.

Inbound message shape (documented in docs/a2a.md):

* text parts are joined (newline) into the MAIL message ``body``;
* a data part ``{"breakpoint_tool_call_result": ...}`` resumes a breakpoint pause
  (``resume_from = "breakpoint_tool_call"``; optional ``"breakpoint_tool_caller"``);
* a data part ``{"decisions": [...]}`` answers an action review (``resume_from =
  "action_review"``);
* a data part may also carry ``"entrypoint"``, ``"subject"`` and ``"max_steps"``;
* anything else continues the MAIL task with the text (``user_response``).

The MAIL task id is derived from the A2A ``contextId`` (the context *is* the MAIL task): a
new A2A task in the same context continues the MAIL task with its agents' memory, and an
``input-required`` A2A task resumed with a follow-up message resumes the paused MAIL task.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
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


@dataclass
class InboundMessage:
    body: str
    resume_from: str | None = None
    entrypoint: str | None = None
    subject: str = "New Message"
    kwargs: dict[str, Any] = field(default_factory=dict)


def _int_or_none(value: Any) -> Any:
    # A2A data parts carry numbers as doubles (google.protobuf.Value).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def inbound_message(texts: list[str], data: list[Any]) -> InboundMessage:
    """What a MAIL ``POST /message`` would have been for these A2A parts."""
    msg = InboundMessage(body="\n".join(t for t in texts if t))
    for item in data:
        if not isinstance(item, dict):
            continue
        if "breakpoint_tool_call_result" in item:
            msg.resume_from = "breakpoint_tool_call"
            msg.kwargs["breakpoint_tool_call_result"] = item["breakpoint_tool_call_result"]
            if isinstance(item.get("breakpoint_tool_caller"), str):
                msg.kwargs["breakpoint_tool_caller"] = item["breakpoint_tool_caller"]
        if "decisions" in item:
            msg.resume_from = "action_review"
            msg.kwargs["decisions"] = item["decisions"]
        if isinstance(item.get("entrypoint"), str):
            msg.entrypoint = item["entrypoint"]
        if isinstance(item.get("subject"), str):
            msg.subject = item["subject"]
        if "max_steps" in item:
            msg.kwargs["max_steps"] = _int_or_none(item["max_steps"])
    return msg


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
