"""Actions of the `email-review` example swarm (see docs/review.md).

`send_email` is reviewed with every decision; `ask_question` only allows `respond` and
`ignore`, so it never runs: the person's answer is its result. Nothing leaves the machine:
sent emails land in an in-process outbox.
"""

from __future__ import annotations

from typing import Any

OUTBOX: list[dict[str, str]] = []


async def send_email(args: dict[str, Any]) -> str:
    email = {
        "to": str(args.get("to", "")),
        "subject": str(args.get("subject", "")),
        "body": str(args.get("body", "")),
    }
    if "@" not in email["to"]:
        raise ValueError(f"'{email['to']}' is not an email address")
    OUTBOX.append(email)
    return f"Email sent to {email['to']} (subject: {email['subject'] or '(none)'})."


async def ask_question(args: dict[str, Any]) -> str:
    # Review allows only respond/ignore, so this runs only if a swarm changes that.
    return "Nobody answered the question."
