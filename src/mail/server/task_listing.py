"""``GET /tasks``: the caller's task summaries, newest first, one page at a time."""

from __future__ import annotations

import base64
import binascii
import datetime
from typing import Any

from mail.server.errors import BadRequest

DEFAULT_PAGE = 100
MAX_PAGE = 1000


def parse_limit(value: str | None) -> int:
    if value is None or value == "":
        return DEFAULT_PAGE
    try:
        limit = int(value)
    except ValueError:
        raise BadRequest(f"parameter 'limit' must be an integer, got '{value[:40]}'") from None
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"parameter 'limit' must be between 1 and {MAX_PAGE}, got {limit}")
    return limit


def _sort_key(record: dict[str, Any]) -> tuple[str, str]:
    return (str(record.get("start_time") or ""), str(record.get("task_id") or ""))


def encode_cursor(record: dict[str, Any]) -> str:
    start, task_id = _sort_key(record)
    return base64.urlsafe_b64encode(f"{start}\n{task_id}".encode()).decode().rstrip("=")


def decode_cursor(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    try:
        text = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        start, task_id = text.split("\n", 1)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadRequest(
            "parameter 'cursor' is not a cursor this server issued (take it from X-Next-Cursor)"
        ) from None
    return start, task_id


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """A task record without its event log (``event_count`` says how long the log is)."""
    out = {k: v for k, v in record.items() if k != "events"}
    events = record.get("events")
    out["event_count"] = len(events) if isinstance(events, list) else 0
    return out


def page_list(
    records: list[dict[str, Any]], limit: int, cursor: tuple[str, str] | None
) -> tuple[list[dict[str, Any]], str | None]:
    """(one page of records, cursor of the next page or None); newest tasks first."""
    ordered = sorted(records, key=_sort_key, reverse=True)
    if cursor is not None:
        ordered = [r for r in ordered if _sort_key(r) < cursor]
    chosen = ordered[:limit]
    following = encode_cursor(chosen[-1]) if len(ordered) > limit else None
    return chosen, following


def page(
    records: list[dict[str, Any]], limit: int, cursor: tuple[str, str] | None
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(one page keyed by task id, cursor of the next page or None); newest tasks first."""
    chosen, following = page_list(records, limit, cursor)
    return {str(r["task_id"]): r for r in chosen}, following


def page_headers(path: str, limit: int, following: str | None) -> dict[str, str]:
    """``X-Next-Cursor`` and ``Link: rel="next"`` when another page follows."""
    if following is None:
        return {}
    return {
        "X-Next-Cursor": following,
        "Link": f'<{path}?limit={limit}&cursor={following}>; rel="next"',
    }


_PREVIEW_CHARS = 300


def _clip(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "…"


def preview(task: Any) -> dict[str, Any]:
    """What a task list row shows: the first user message, the answer (both clipped), and
    seconds from the start to the last event."""
    question = None
    for event in task.events[:50]:
        message = event.extra_data.get("full_message")
        if isinstance(message, dict):
            sender = (message.get("message") or {}).get("sender") or {}
            if sender.get("address_type") in ("user", "admin"):
                question = _clip((message.get("message") or {}).get("body"))
                break
    response = task.response if isinstance(task.response, dict) else {}
    answer = _clip((response.get("message") or {}).get("body"))
    duration = None
    if task.events:
        try:
            last = datetime.datetime.fromisoformat(task.events[-1].timestamp)
            duration = round(max(0.0, (last - task.start_time).total_seconds()), 3)
        except (TypeError, ValueError):
            duration = None
    return {"first_message": question, "answer": answer, "duration_s": duration}
