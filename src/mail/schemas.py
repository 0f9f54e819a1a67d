"""JSON Schema validation of MAIL wire payloads and swarms.json."""

from __future__ import annotations

import datetime
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

__all__ = [
    "CORE_SCHEMA",
    "INTERSWARM_SCHEMA",
    "SWARMS_SCHEMA",
    "SchemaValidationError",
    "find_schema_file",
    "get_validator",
    "load_schema",
    "schema_errors",
    "validate_against",
    "validate_interswarm",
    "validate_message",
    "validate_swarms_json",
]

CORE_SCHEMA = "MAIL-core.schema.json"
INTERSWARM_SCHEMA = "MAIL-interswarm.schema.json"
SWARMS_SCHEMA = "swarms-schema.json"

# Directories (relative to the repository root) searched for schema files, in order.
_SCHEMA_DIRS = ("spec", "docs")

# RFC 3339 date-time (the JSON Schema "date-time" format). jsonschema only checks
# this format when the optional rfc3339-validator package is installed, which we
# don't depend on; a regex plus a calendar check is enough.
_DATE_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
    r"([Zz]|[+-](\d{2}):(\d{2}))$"
)


class SchemaValidationError(ValueError):
    """A payload does not match its schema.

    ``errors`` lists every violation as ``"<path>: <message>"``; ``str(exc)``
    shows the most relevant one first.
    """

    def __init__(self, schema_name: str, errors: list[str]) -> None:
        self.schema_name = schema_name
        self.errors = errors
        first = errors[0] if errors else "unknown error"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"invalid payload for {schema_name}: {first}{more}")


def _is_rfc3339_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True  # formats only constrain strings
    match = _DATE_TIME.match(value)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59):
        return False
    if second > 60:  # 60 allows a leap second
        return False
    if match.group(9) is not None and (int(match.group(9)) > 23 or int(match.group(10)) > 59):
        return False
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return True


def _format_checker() -> FormatChecker:
    checker = FormatChecker()  # instance copy of the default checkers (uuid, email, ...)
    checker.checks("date-time")(_is_rfc3339_date_time)
    return checker


def find_schema_file(name: str) -> Path:
    """Locate ``name`` in ``spec/`` or ``docs/`` of the nearest enclosing repository root."""
    here = Path(__file__).resolve()
    for directory in here.parents:
        for sub in _SCHEMA_DIRS:
            candidate = directory / sub / name
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(
        f"schema '{name}' not found in spec/ or docs/ of any parent directory of {here}"
    )


@cache
def load_schema(name: str) -> dict[str, Any]:
    """Return the parsed schema ``name`` (e.g. ``"MAIL-core.schema.json"``).

    The result is cached and shared; treat it as read-only.
    """
    with find_schema_file(name).open(encoding="utf-8") as fh:
        schema = json.load(fh)
    if not isinstance(schema, dict):
        raise ValueError(f"schema file '{name}' does not contain a JSON object")
    return schema


@cache
def _registry() -> Registry:
    """A registry holding the wire schemas, so relative ``$ref``s between them resolve."""
    resources = []
    for name in (CORE_SCHEMA, INTERSWARM_SCHEMA):
        schema = load_schema(name)
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@cache
def get_validator(name: str) -> Draft202012Validator:
    """A compiled, cached validator for schema ``name``."""
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=_registry(), format_checker=_format_checker())


def _describe(error: ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path) or "<root>"
    return f"{path}: {error.message}"


def schema_errors(instance: Any, name: str) -> list[str]:
    """Every violation of schema ``name`` by ``instance``, most relevant first; [] if valid."""
    validator = get_validator(name)
    errors = list(validator.iter_errors(instance))
    if not errors:
        return []
    best = best_match(errors)
    ordered = [best] + [e for e in errors if e is not best]
    return [_describe(e) for e in ordered]


def validate_against(instance: Any, name: str) -> None:
    """Raise SchemaValidationError unless ``instance`` matches schema ``name``."""
    errors = schema_errors(instance, name)
    if errors:
        raise SchemaValidationError(name, errors)


# Optional fields that the original implementation (and our runtime's internal dicts)
# fill with null, while the wire schemas type them as string/list/object.
_NULLABLE_PAYLOAD_FIELDS = ("sender_swarm", "recipient_swarm", "recipient_swarms", "routing_info")
_NULLABLE_ENVELOPE_FIELDS = ("auth_token", "metadata")


def _without_nulls(mapping: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(mapping, dict):
        return mapping
    return {k: v for k, v in mapping.items() if not (v is None and k in fields)}


def validate_message(message: Any, *, allow_null_optional: bool = True) -> None:
    """Check a MAILMessage (``{id, timestamp, message, msg_type}``) against the core schema.

    The schema types the optional payload fields ``sender_swarm``,
    ``recipient_swarm``, ``recipient_swarms`` and ``routing_info`` as non-null, but
    implementations (the original included) put ``null`` there for local messages.
    By default such nulls are treated as absent; ``allow_null_optional=False``
    checks the payload exactly as given. Required fields are never nullable.
    """
    if (
        allow_null_optional
        and isinstance(message, dict)
        and isinstance(message.get("message"), dict)
    ):
        message = {
            **message,
            "message": _without_nulls(message["message"], _NULLABLE_PAYLOAD_FIELDS),
        }
    validate_against(message, CORE_SCHEMA)


def validate_interswarm(envelope: Any, *, allow_null_optional: bool = True) -> None:
    """Check an interswarm envelope against the interswarm schema (payload included).

    Null ``auth_token``/``metadata`` and null optional payload fields are treated
    as absent unless ``allow_null_optional=False`` (see validate_message).
    """
    if allow_null_optional and isinstance(envelope, dict):
        envelope = _without_nulls(envelope, _NULLABLE_ENVELOPE_FIELDS)
        if "payload" in envelope:
            envelope["payload"] = _without_nulls(envelope["payload"], _NULLABLE_PAYLOAD_FIELDS)
    validate_against(envelope, INTERSWARM_SCHEMA)


def validate_swarms_json(data: Any) -> None:
    """Check the content of a swarms.json file (a list of swarms) against docs/swarms-schema.json."""
    validate_against(data, SWARMS_SCHEMA)
