"""`classify_ticket`: keyword rules that file a support ticket (deterministic, offline)."""

from __future__ import annotations

import json
import re
from typing import Any

from mail.api import action
from mail.examples.arguments import required_text, schema, string

# Category -> words that point to it (a word counts once).
CATEGORIES: dict[str, tuple[str, ...]] = {
    "billing": ("bill", "charge", "charged", "invoice", "payment", "refund", "price", "paid"),
    "technical": ("error", "crash", "bug", "broken", "load", "login", "app", "slow", "fail"),
    "account": ("account", "password", "email", "username", "profile", "delete", "sign"),
    "shipping": ("order", "deliver", "delivery", "shipping", "package", "track", "arrive"),
}

URGENT_WORDS = ("urgent", "immediately", "asap", "emergency", "lawyer", "fraud", "stolen")
HIGH_WORDS = ("angry", "unacceptable", "twice", "again", "still", "days", "weeks", "cancel")

CLASSIFY_TICKET_PARAMETERS = schema(
    ["text"], text=string("The ticket text as the customer wrote it")
)


def classify(text: str) -> dict[str, Any]:
    """Category, priority and the words that decided them."""
    words = set(re.findall(r"[a-z]+", text.lower()))
    hits = {
        category: sorted(w for w in words if any(w.startswith(k) for k in keys))
        for category, keys in CATEGORIES.items()
    }
    category = max(hits, key=lambda c: (len(hits[c]), -list(CATEGORIES).index(c)))
    if not hits[category]:
        category = "general"
    if any(w in words for w in URGENT_WORDS):
        priority = "urgent"
    elif any(w in words for w in HIGH_WORDS) or text.count("!") >= 2:
        priority = "high"
    elif category in ("billing", "technical"):
        priority = "medium"
    else:
        priority = "low"
    return {
        "category": category,
        "priority": priority,
        "matched_keywords": hits.get(category, []),
    }


@action(
    description="Classify a support ticket: its category and its priority.",
    parameters=CLASSIFY_TICKET_PARAMETERS,
)
async def classify_ticket(args: dict[str, Any]) -> str:
    return json.dumps(classify(required_text(args, "text")))
