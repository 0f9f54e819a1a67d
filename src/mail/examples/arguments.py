"""An example action's arguments: the schema pieces and the checks the example actions share.

`schema` and the pieces after it build the JSON schema an action declares. Each check takes
the action's ``args`` and one field's name and returns the value the action works with, or
raises ValueError naming the field (the agent gets the message as the call's error). Whole
numbers are clamped to their range rather than refused, as the schemas' ``minimum``/``maximum``
advise the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def schema(required: Sequence[str], **properties: dict[str, Any]) -> dict[str, Any]:
    """An action's parameters: an object with these properties, `required` among them."""
    return {"type": "object", "properties": properties, "required": list(required)}


def string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def one_of(options: Sequence[str], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(options), "description": description}


def integer(description: str, low: int, high: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high, "description": description}


def array(items: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "array", "items": items, "description": description}


def required_text(args: dict[str, Any], field: str) -> str:
    """The field's text without surrounding white space; absent or blank is an error."""
    value = str(args.get(field) or "").strip()
    if not value:
        raise ValueError(f"{field} is required")
    return value


def bounded_text(args: dict[str, Any], field: str, limit: int) -> str:
    """The field's text as given (absent: empty); more than `limit` characters is an error."""
    value = str(args.get(field) or "")
    if len(value) > limit:
        raise ValueError(f"{field} is limited to {limit} characters")
    return value


def choice(args: dict[str, Any], field: str, options: Sequence[str], default: str = "") -> str:
    """One of `options` (absent: `default`)."""
    value = str(args.get(field) or default)
    if value not in options:
        raise ValueError(f"{field} must be one of {', '.join(options)}")
    return value


def clamped(args: dict[str, Any], field: str, default: int, low: int, high: int) -> int:
    """A whole number brought into ``low..high`` (absent: `default`)."""
    return min(max(int(args.get(field) or default), low), high)


def objects(args: dict[str, Any], field: str) -> list[dict[str, Any]]:
    """A list of JSON objects."""
    value = args.get(field)
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ValueError(f"{field} must be a list of objects")
    return value
