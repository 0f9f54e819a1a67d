"""What the demo model does for an agent that drafts emails under human review."""

from __future__ import annotations

import re
from typing import Any, Protocol

from mail.core.review import REJECTED_PREFIX
from mail.factories.demo_text import Incoming, fill_arguments, summarize

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_RECIPIENT_KEYS = ("to", "recipient", "recipients", "email", "address", "email_address")


class _ToolLike(Protocol):
    name: str
    parameters: dict[str, Any]


def question_action(actions: list[Any]) -> Any | None:
    for tool in actions:
        lowered = tool.name.lower()
        if "question" in lowered or lowered.startswith("ask"):
            return tool
    return None


def draft_action(actions: list[Any]) -> Any | None:
    for tool in actions:
        properties = (tool.parameters or {}).get("properties") or {}
        if "body" in properties and any(k in properties for k in _RECIPIENT_KEYS):
            return tool
    return None


def is_status(result: str) -> bool:
    """A tool result the runtime wrote (not words a reviewer typed)."""
    return result.startswith(("SUCCESS", "ERROR", REJECTED_PREFIX))


def ask_recipient(question: _ToolLike) -> tuple[str, dict[str, Any]]:
    text = "Who should receive this email? Please give me their address."
    return question.name, fill_arguments(question.parameters, text)


def draft(tool: _ToolLike, request: Incoming, extra: str = "") -> tuple[str, dict[str, Any]]:
    """Arguments of a drafted email for `request` (plus the person's answer, if any)."""
    text = f"{request.body} {extra}".strip()
    args = fill_arguments(tool.parameters, text)
    properties = (tool.parameters or {}).get("properties") or {}
    found = EMAIL.search(text)
    for key in properties:
        if key in _RECIPIENT_KEYS:
            args[key] = found.group(0) if found else extra.strip()
        elif key == "subject":
            subject = request.subject if request.subject not in ("", "New Message") else ""
            args[key] = subject or summarize(EMAIL.sub("", request.body).strip(" ,."), 60)
    topic = EMAIL.sub("", request.body).strip(" ,.")
    args["body"] = f"Hello,\n\n{summarize(topic, 400)}\n\nBest regards"
    return tool.name, args


def redraft(tool: _ToolLike, previous: dict[str, Any], feedback: str) -> tuple[str, dict[str, Any]]:
    revised = dict(previous)
    revised["body"] = f"{previous.get('body', '')}\n\n(Revised after your feedback: {feedback})"
    return tool.name, revised


def after_review(
    actions: list[Any],
    names: list[str],
    args: list[dict[str, Any]],
    results: list[str],
    origin: Incoming | None,
) -> tuple[str, dict[str, Any]] | None:
    """The next call after a reviewed batch, or None for the ordinary behaviour."""
    question, drafting = question_action(actions), draft_action(actions)
    if question is None or drafting is None or origin is None or not results:
        return None
    answer = results[-1]
    if is_status(answer):
        return None
    if names and names[-1] == question.name:
        return draft(drafting, origin, answer)
    if names and names[-1] == drafting.name:
        return redraft(drafting, args[-1] if args else {}, answer)
    return None


def new_request(actions: list[Any], request: Incoming) -> tuple[str, dict[str, Any]] | None:
    question, drafting = question_action(actions), draft_action(actions)
    if question is None or drafting is None:
        return None
    if not EMAIL.search(f"{request.subject} {request.body}"):
        return ask_recipient(question)
    return draft(drafting, request)
