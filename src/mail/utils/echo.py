"""What an error message may repeat of a caller's input: at most `ECHO_CHARS` characters.

An error that names the bad value helps the caller; one that repeats a 3 KB value back
(or a 1 MB one, where the body allows it) only fills logs and responses. `echo` keeps the
start of the value and marks the cut with an ellipsis.
"""

from __future__ import annotations

ECHO_CHARS = 100  # docs/security.md, limits table


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """`value` as text, cut to `limit` characters followed by '...' when longer."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "..."
