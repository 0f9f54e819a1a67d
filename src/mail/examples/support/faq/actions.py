"""`search_faq`: word-overlap search over a small built-in FAQ (no network, no database)."""

from __future__ import annotations

import json
import re
from typing import Any

from mail.api import action
from mail.examples.arguments import clamped, integer, required_text, schema, string

# (id, question, answer): a made-up shop's help centre.
FAQ: tuple[tuple[str, str, str], ...] = (
    (
        "reset-password",
        "How do I reset my password?",
        "Choose 'Forgot password' on the sign-in page; a reset link valid for one hour is "
        "emailed to you.",
    ),
    (
        "change-email",
        "How do I change the email address on my account?",
        "Open Settings > Account, enter the new address and confirm it from the message we send.",
    ),
    (
        "delete-account",
        "How do I delete my account?",
        "Settings > Account > Delete account. Data is removed within 30 days; orders in transit "
        "are still delivered.",
    ),
    (
        "refund-policy",
        "What is your refund policy?",
        "Unused items can be returned within 30 days for a full refund to the original payment "
        "method.",
    ),
    (
        "refund-time",
        "How long does a refund take?",
        "Refunds are issued within 2 business days of the return arriving; banks take 3-5 more.",
    ),
    (
        "shipping-time",
        "How long does shipping take?",
        "Standard shipping takes 3-5 business days, express 1-2. A tracking link is emailed at "
        "dispatch.",
    ),
    (
        "order-tracking",
        "Where is my order? How do I track it?",
        "Use the tracking link in your dispatch email, or Orders > Track in your account.",
    ),
    (
        "payment-methods",
        "Which payment methods do you accept?",
        "Cards (Visa, Mastercard, Amex), PayPal and bank transfer.",
    ),
    (
        "double-charge",
        "I was charged twice for one order.",
        "A second charge is usually a pending authorisation that disappears within 3 days; if "
        "not, send us both transaction ids.",
    ),
    (
        "app-crash",
        "The app crashes or will not load.",
        "Update to the latest version, then clear the app cache; if it still fails, send us "
        "your device model and app version.",
    ),
    (
        "contact-human",
        "How can I talk to a person?",
        "Write 'agent' in the chat or call support on weekdays 8:00-18:00.",
    ),
)

_STOP = frozenset(
    "a an and are be can do does for how i in is it my of on or the to what when where "
    "which who why will with you your".split()
)

SEARCH_FAQ_PARAMETERS = schema(
    ["query"],
    query=string("The customer's question or keywords"),
    max_results=integer("How many entries to return at most (default 3)", 1, 10),
)


def _words(text: str) -> set[str]:
    words = {w.rstrip("s") for w in re.findall(r"[a-z]+", text.lower())}
    return {w for w in words if w and w not in _STOP}


def rank_faq(query: str, limit: int) -> list[dict[str, Any]]:
    """The FAQ entries sharing the most words with `query`, best first."""
    wanted = _words(query)
    scored: list[tuple[float, str, str, str]] = []
    for entry_id, question, answer in FAQ:
        overlap = wanted & _words(f"{entry_id.replace('-', ' ')} {question}")
        if overlap:
            scored.append((round(len(overlap) / len(wanted), 2), entry_id, question, answer))
    scored.sort(key=lambda e: (-e[0], e[1]))
    return [
        {"id": entry_id, "question": question, "answer": answer, "score": score}
        for score, entry_id, question, answer in scored[:limit]
    ]


@action(
    description="Search the help-centre FAQ for entries that answer a customer's question.",
    parameters=SEARCH_FAQ_PARAMETERS,
)
async def search_faq(args: dict[str, Any]) -> str:
    query = required_text(args, "query")
    results = rank_faq(query, clamped(args, "max_results", 3, 1, 10))
    return json.dumps({"query": query, "results": results, "found": len(results)})
