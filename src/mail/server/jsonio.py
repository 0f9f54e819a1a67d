"""JSON encode/decode for the HTTP layer: orjson when it is installed, the stdlib otherwise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

from starlette.responses import Response

_orjson: Any
try:  # orjson is not a declared dependency; use it only when the environment already has it
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


def _default(obj: Any) -> Any:
    # Sets (e.g. remote_swarms) and other iterables become lists; anything else its str().
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return str(obj)


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj, default=_default)
        except TypeError:
            pass  # e.g. non-str dict keys: let the stdlib coerce them
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_default).encode(
        "utf-8"
    )


def dumps_str(obj: Any) -> str:
    return dumps(obj).decode("utf-8")


# Where a request's body, parsed as a JSON object before its route ran (by the
# Idempotency-Key guard, for its fingerprint), waits for the route's `read_json_object`.
PARSED_BODY = "mail.parsed_body"


def loads(data: bytes | str) -> Any:
    if _orjson is not None:
        return _orjson.loads(data)
    return json.loads(data)


class JSONBody(Response):
    """A JSON response rendered with :func:`dumps`."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


_END = object()


def _children(value: Any) -> Iterator[Any] | None:
    if isinstance(value, dict):
        return iter(value.values())
    if isinstance(value, list):
        return iter(value)
    return None


def excess(value: Any, max_values: int, max_depth: int = 0) -> Literal["values", "depth"] | None:
    """``"values"`` when ``value`` holds more than ``max_values`` JSON values (itself, every
    array item and object member, at any depth), ``"depth"`` when arrays and objects are
    nested more than ``max_depth`` deep (``[[1]]`` is 2); None when within both (0 = no bound).
    """
    count = 1
    children = _children(value)
    if children is None:
        return None
    stack: list[Iterator[Any]] = [children]
    while stack:
        child = next(stack[-1], _END)
        if child is _END:
            stack.pop()
            continue
        count += 1
        if max_values and count > max_values:
            return "values"
        grandchildren = _children(child)
        if grandchildren is not None:
            if max_depth and len(stack) + 1 > max_depth:
                return "depth"
            stack.append(grandchildren)
    return None
