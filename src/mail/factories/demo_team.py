"""What the offline demo model (`mail/demo`) does with the team tools."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from mail.factories.demo_text import Incoming, parse_incoming, summarize

# How mail.api.swarm introduces the list of files uploaded with a message.
_ATTACHMENTS_NOTE = "\n\nAttached files ("
TEAM_MARKERS = ("create_thread", "transfer_file", "read_attachment")
_ATTACHMENT = re.compile(r"\(attachment id (att_[0-9a-f]+), (\d+) bytes\)")
_FILE_ID = re.compile(r"attachment id (att_[0-9a-f]+)\.")
_FILE_NAME = re.compile(r"^- ([^\n]+?) \(attachment id", re.M)


@dataclass
class _Progress:
    """The lead's steps since the user's request, read from its history."""

    origin: Incoming | None = None
    calls: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)  # name, args, result
    replies: list[Incoming] = field(default_factory=list)

    def called(self, name: str) -> list[tuple[dict[str, Any], str]]:
        return [(args, result) for n, args, result in self.calls if n == name]


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _progress(messages: list[dict[str, Any]]) -> _Progress:
    progress = _Progress()
    pending: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        role = message.get("role")
        if role == "user" and isinstance(message.get("content"), str):
            incoming = parse_incoming(message["content"])
            if incoming.manual:
                continue
            if incoming.sender_type in ("user", "admin"):
                progress = _Progress(origin=incoming)
                pending.clear()
            elif incoming.sender_type == "agent":
                progress.replies.append(incoming)
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                pending[call.get("id", "")] = (
                    function.get("name", ""),
                    _arguments(function.get("arguments")),
                )
        elif role == "tool":
            name, args = pending.pop(message.get("tool_call_id", ""), ("", {}))
            content = message.get("content")
            progress.calls.append((name, args, content if isinstance(content, str) else ""))
    return progress


def _json_in(text: str) -> dict[str, Any]:
    start = text.find("{")
    try:
        value = json.loads(text[start:]) if start >= 0 else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _enum(tools: dict[str, Any], tool: str, prop: str) -> list[str]:
    spec = tools.get(tool)
    if spec is None:
        return []
    schema = (spec.parameters.get("properties") or {}).get(prop) or {}
    return list(schema.get("enum") or [])


def lead_turn(tools: dict[str, Any], messages: list[dict[str, Any]]) -> list[Any] | None:
    """The lead's next calls, or None when the general demo logic should decide."""
    if not all(name in tools for name in ("task_complete", "create_thread", "send_request")):
        return None
    request_props = (tools["send_request"].parameters.get("properties") or {}).keys()
    if "wait_for_reply" not in request_props:
        return None
    progress = _progress(messages)
    origin = progress.origin
    if origin is None:
        return None
    team = _enum(tools, "send_request", "target")
    if not team:
        return None
    # The request itself, without the note POST /message appends for uploaded files.
    request = origin.body.split(_ATTACHMENTS_NOTE, 1)[0].strip()
    title = summarize(request, 60)
    created = progress.called("create_thread")
    if not created:
        return [
            (
                "create_thread",
                {"title": title, "participants": team, "initial_message": origin.body},
            )
        ]
    thread_id = _json_in(created[-1][1]).get("thread_id", "")
    files = _ATTACHMENT.findall(origin.body)
    names = _FILE_NAME.findall(origin.body)
    receiver = team[-1]
    if files and "save_attachment" in tools and not progress.called("save_attachment"):
        filename = names[0] if names else "attachment.txt"
        return [("save_attachment", {"attachment_id": files[0][0], "path": filename})]
    if files and "transfer_file" in tools and not progress.called("transfer_file"):
        saved = progress.called("save_attachment")
        where = saved[-1][1].split("saved to ", 1)[-1].split(" in your working folder")[0]
        return [
            (
                "transfer_file",
                {
                    "recipient": receiver,
                    "source_path": where,
                    "description": f"File for '{title}'",
                },
            )
        ]
    asked = progress.called("send_request")
    if not asked:
        return [
            (
                "send_request",
                {
                    "target": team[0],
                    "subject": title,
                    "body": request,
                    "wait_for_reply": True,
                },
            )
        ]
    answer = asked[-1][1]
    if "<body>" in answer:
        answer = answer.split("<body>", 1)[1].rsplit("</body>", 1)[0]
    if not progress.called("post_to_thread") and thread_id and "post_to_thread" in tools:
        return [("post_to_thread", {"thread_id": thread_id, "body": f"{team[0]}: {answer}"})]
    sent_file = bool(progress.called("transfer_file"))
    confirmation = [r for r in progress.replies if r.sender == receiver]
    if sent_file and not confirmation and "await_message" in tools:
        waits = progress.called("await_message")
        if len(waits) < 2:
            return [("await_message", {"reason": f"waiting for {receiver} to confirm the file"})]
    lines = [f"Thread {thread_id} opened with {', '.join(team)}.", f"{team[0]} answered: {answer}"]
    if confirmation:
        lines.append(f"{receiver} about the file: {confirmation[-1].body}")
    return [("task_complete", {"finish_message": "\n".join(lines)})]


def teammate_turn(tools: dict[str, Any], messages: list[dict[str, Any]]) -> list[Any] | None:
    """A teammate handed a file reads it, then tells the sender what it got."""
    if "read_attachment" not in tools or "send_response" not in tools:
        return None
    last_file: Incoming | None = None
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            incoming = parse_incoming(message["content"])
            if incoming.sender_type == "agent" and incoming.subject.startswith("File: "):
                last_file = incoming
            elif incoming.sender_type == "agent":
                last_file = None
    if last_file is None:
        return None
    found = _FILE_ID.search(last_file.body)
    if found is None:
        return None
    progress = _progress(messages)
    reads = [r for a, r in progress.called("read_attachment") if a.get("attachment_id") == found[1]]
    if not reads:
        return [("read_attachment", {"attachment_id": found[1]})]
    content = reads[-1].removeprefix("SUCCESS: ")
    body = f"Received {last_file.subject[6:]}: {summarize(content, 160)}"
    return [("send_response", {"target": last_file.sender, "subject": "Re: file", "body": body})]
