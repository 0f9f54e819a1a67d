"""Text from outside (a model's reply, a tool's output) made valid Unicode."""

from __future__ import annotations

import json
from typing import Any


def valid_str(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def valid_text(value: Any) -> Any:
    """`value` (str, or lists and dicts of them, keys included) with valid strings only."""
    if isinstance(value, str):
        return valid_str(value)
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [valid_text(v) for v in value]
    return value


def loads_valid(data: str | bytes) -> Any:
    """`json.loads(data)` with valid strings only: what another party sent (a peer swarm's
    answer) may spell a lone surrogate, escaped or as raw bytes, which the standard decoder
    keeps; every string holding one is made valid (`valid_text`)."""
    value = json.loads(data)
    if isinstance(data, bytes):
        suspect = b"\\u" in data or not data.isascii()
    else:
        suspect = "\\u" in data or not data.isascii()
    return valid_text(value) if suspect else value
