"""Settings the runtime hands to agent functions, including the functions wrappers hold."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Attributes through which a wrapper exposes the function it wraps.
_INNER = ("supervisor_fn", "action_agent_fn", "_mail_agent")


def function_chain(fn: Any) -> Iterator[Any]:
    """``fn`` and every function it wraps, each once (outermost first)."""
    seen: set[int] = set()
    pending = [fn]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend(getattr(current, attr, None) for attr in reversed(_INNER))


def apply_print_flag(fn: Any, value: bool) -> None:
    """Whether agent functions print their LLM streams."""
    for current in function_chain(fn):
        try:
            if hasattr(current, "print_llm_streams") or hasattr(current, "__dict__"):
                current.print_llm_streams = value
        except (AttributeError, TypeError):
            pass


def attach_recall(fn: Any, recall: Any) -> None:
    """Give agent functions that keep a memory a ``recall`` function."""
    for current in function_chain(fn):
        try:
            if hasattr(current, "memory"):
                current.recall = recall
        except (AttributeError, TypeError):
            pass
