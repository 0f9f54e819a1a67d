"""What an error message may repeat of a caller's input: at most `ECHO_CHARS` characters."""

from __future__ import annotations

ECHO_CHARS = 100  # docs/security.md, limits table


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """`value` as text, cut to `limit` characters followed by '...' when longer."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "..."
