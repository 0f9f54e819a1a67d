"""Per-task budgets: tokens and cost a task may spend before it pauses for its caller."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mail.telemetry.usage import Totals

BUDGET_SUBJECT = "::budget_exceeded::"
BUDGET_KEYS = ("max_tokens_total", "max_cost")
# The task event that records a budget a caller set (so it survives a restart).
BUDGET_EVENT = "budget_set"
# The largest token budget accepted: integers beyond this lose precision in JSON readers
# (the console's JavaScript), and no task spends that many tokens.
MAX_TOKENS_TOTAL = 2**53 - 1


class BudgetError(ValueError):
    """A budget in a submission that is malformed (400) or too small to continue (409)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Budget:
    max_tokens_total: int | None = None
    max_cost: float | None = None

    def exceeded(self, spent: Totals) -> str | None:
        """Why `spent` is over this budget, or None."""
        if self.max_tokens_total is not None and spent.total_tokens >= self.max_tokens_total:
            return (
                f"the task used {spent.total_tokens} tokens; its budget is "
                f"{self.max_tokens_total} (max_tokens_total)"
            )
        if self.max_cost is not None and spent.cost >= self.max_cost:
            return f"the task cost {spent.cost:.6f}; its budget is {self.max_cost:g} (max_cost)"
        return None

    def merged(self, kwargs: dict[str, Any]) -> Budget:
        """This budget with the limits `kwargs` sets (null removes one)."""
        tokens, cost = self.max_tokens_total, self.max_cost
        if "max_tokens_total" in kwargs:
            tokens = parse_tokens(kwargs["max_tokens_total"])
        if "max_cost" in kwargs:
            cost = parse_cost(kwargs["max_cost"])
        return Budget(tokens, cost)


def parse_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS_TOTAL:
        raise BudgetError(
            "kwargs.max_tokens_total must be an integer from 0 to "
            f"{MAX_TOKENS_TOTAL} or null, got {_shown(value)}"
        )
    return value or None


def parse_cost(value: Any) -> float | None:
    if value is None:
        return None
    # NaN would never be exceeded, and NaN or infinity would poison the stored event
    # (PostgreSQL's jsonb refuses them); an integer too big for a float would raise.
    try:
        cost = float(value) if isinstance(value, int | float) else math.nan
    except OverflowError:
        cost = math.inf
    if isinstance(value, bool) or not math.isfinite(cost) or cost < 0:
        raise BudgetError(
            f"kwargs.max_cost must be a finite non-negative number or null, got {_shown(value)}"
        )
    return cost or None


def _shown(value: Any) -> str:
    """A caller's value in an error message, cut short (it may be huge)."""
    try:
        text = repr(value)
    except ValueError:  # an integer of more digits than Python converts to text
        return "a huge integer"
    return text if len(text) <= 40 else text[:40] + "..."


_defaults = Budget()


def set_default_budget(max_tokens_total: int | None, max_cost: float | None) -> None:
    """The budget of every task that sets none ([server.telemetry] in mail.toml)."""
    global _defaults
    _defaults = Budget(max_tokens_total or None, max_cost or None)


def default_budget() -> Budget:
    return _defaults
