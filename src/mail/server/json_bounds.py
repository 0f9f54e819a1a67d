"""How big a parsed JSON value is, counted without recursion and stopping at the bound."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

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
