"""`analyze_sentiment` (a small word lexicon) and `create_escalation` (a synthetic record)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

from mail.api import action
from mail.examples.arguments import choice, one_of, required_text, schema, string

POSITIVE = frozenset(
    "thanks thank great good love happy pleased excellent helpful quick perfect glad".split()
)
NEGATIVE = frozenset(
    "bad angry annoyed awful broken terrible useless unacceptable disappointed frustrated "
    "worst hate ridiculous slow never refund cancel".split()
)
INTENSIFIERS = frozenset("very really extremely so totally completely".split())
PRIORITIES = ("high", "urgent")

ANALYZE_SENTIMENT_PARAMETERS = schema(["text"], text=string("What the customer wrote"))

CREATE_ESCALATION_PARAMETERS = schema(
    ["ticket_id", "reason", "priority"],
    ticket_id=string("The ticket to escalate"),
    reason=string("Why a person should look at it"),
    priority=one_of(PRIORITIES, "How soon a person should look at it"),
)


def score_sentiment(text: str) -> dict[str, Any]:
    """A score in [-1, 1], its label, and whether a person should step in."""
    words = re.findall(r"[a-z']+", text.lower())
    score = 0.0
    for index, word in enumerate(words):
        weight = 1.5 if index and words[index - 1] in INTENSIFIERS else 1.0
        if word in POSITIVE:
            score += weight
        elif word in NEGATIVE:
            score -= weight
    score -= 0.5 * min(text.count("!"), 4) if score < 0 else 0
    normalized = max(-1.0, min(1.0, score / 4))
    label = "positive" if normalized > 0.2 else "negative" if normalized < -0.2 else "neutral"
    return {
        "sentiment": label,
        "score": round(normalized, 2),
        "escalate": normalized <= -0.6,
    }


@action(
    description="Analyze the sentiment of a customer's message and say whether to escalate.",
    parameters=ANALYZE_SENTIMENT_PARAMETERS,
)
async def analyze_sentiment(args: dict[str, Any]) -> str:
    return json.dumps(score_sentiment(required_text(args, "text")))


@action(
    description="Create an escalation record so a person reviews the ticket.",
    parameters=CREATE_ESCALATION_PARAMETERS,
)
async def create_escalation(args: dict[str, Any]) -> str:
    ticket_id = required_text(args, "ticket_id")
    reason = required_text(args, "reason")
    priority = choice(args, "priority", PRIORITIES, default="high")
    digest = hashlib.sha256(f"{ticket_id}|{reason}".encode()).hexdigest()[:8].upper()
    record = {
        "escalation_id": f"ESC-{digest}",
        "ticket_id": ticket_id,
        "priority": priority,
        "reason": reason,
        "status": "open",
        "respond_within_hours": 1 if priority == "urgent" else 4,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "note": "demo record: nothing is sent to a ticketing system",
    }
    return json.dumps(record)
