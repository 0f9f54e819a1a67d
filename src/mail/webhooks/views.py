"""What callers see of subscriptions and deliveries, and what they hear when refused."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mail.store.webhooks import Record
from mail.utils.echo import echo
from mail.webhooks import events as ev


class WebhookError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# How a check refuses: WebhookError for /webhooks, HTTPException for /crons (both status, detail).
Refusal = Callable[[int, str], Exception]


def check_fields(
    body: Iterable[str], allowed: Sequence[str], where: str = "", fail: Refusal = WebhookError
) -> None:
    """A 400 naming the first field of `body` (after `where`) that is not in `allowed`."""
    extra = sorted(set(body) - set(allowed))
    if extra:
        accepted = ", ".join(allowed)
        raise fail(400, f"unknown parameter '{where}{echo(extra[0])}'; accepted: {accepted}")


def check_description(value: Any, limit: int, section: str, fail: Refusal = WebhookError) -> str:
    """A subscription's or a cron's description: "" when absent, else a string of at most
    `limit` characters (``max_description_chars`` of the settings ``[server.<section>]``)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise fail(400, "parameter 'description' must be a string")
    if len(value) > limit:
        raise fail(
            400,
            f"parameter 'description' is {len(value)} characters; the limit is {limit} "
            f"([server.{section}] max_description_chars)",
        )
    return value


def _iso(value: float | None) -> str | None:
    return ev.iso_time(value) if value is not None else None


def subscription_view(sub: Mapping[str, Any], now: float | None = None) -> Record:
    """What callers see of a subscription: never a secret, token or credential."""
    now = time.time() if now is None else now
    until = sub.get("previous_secret_until")
    view: Record = {
        "id": sub["subscription_id"],
        "kind": sub["kind"],
        "url": sub["url"],
        "events": list(sub["events"]),
        "description": sub["description"],
        "scope": sub["scope"],
        "task_id": sub["task_id"],
        "active": bool(sub["active"]),
        "disabled_reason": sub["disabled_reason"],
        "failing_since": _iso(sub["failing_since"]),
        "previous_secret_expires_at": _iso(until) if until is not None and until > now else None,
        "created_at": _iso(sub["created_at"]),
        "updated_at": _iso(sub["updated_at"]),
        "expires_at": _iso(sub["expires_at"]),
        "owner": {"role": sub["owner_role"], "id": sub["owner_id"]},
    }
    return view


def delivery_view(row: Mapping[str, Any]) -> Record:
    try:
        body: Any = json.loads(row["payload"])
    except ValueError:
        body = row["payload"]
    return {
        "id": row["delivery_id"],
        "subscription_id": row["subscription_id"],
        "event_id": row["event_id"],
        "event_type": row["event_type"],
        "task_id": row["task_id"],
        "status": row["status"],
        "attempts": row["attempts"],
        "next_attempt_at": _iso(row["next_attempt_at"]) if row["status"] == "pending" else None,
        "last_status": row["last_status"],
        "last_error": row["last_error"],
        "created_at": _iso(row["created_at"]),
        "finished_at": _iso(row["finished_at"]),
        "payload": body,
        "attempts_log": [
            {
                "attempt": a["attempt"],
                "at": _iso(a["started_at"]),
                "status": a["status_code"],
                "latency_ms": a["latency_ms"],
                "response": a["response_excerpt"],
                "error": a["error"],
                "outcome": a["outcome"],
            }
            for a in row.get("attempts_log", [])
        ],
    }


def delivery_cursor(row: Mapping[str, Any]) -> str:
    raw = json.dumps([row["created_at"], row["delivery_id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_delivery_cursor(text: str | None) -> tuple[float, str] | None:
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        created, delivery_id = json.loads(raw)
        return float(created), str(delivery_id)
    except (ValueError, TypeError):
        raise WebhookError(400, "parameter 'cursor' is not a cursor this server gave") from None
