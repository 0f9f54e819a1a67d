"""What an attempt's answer means, and when to try again (pure)."""

from __future__ import annotations

import email.utils
import random
from collections.abc import Sequence
from dataclasses import dataclass

DELIVERED = "delivered"
RETRY = "retry"
FAILED = "failed"
GONE = "gone"


def classify(status: int | None, *, refused: bool = False) -> str:
    """``delivered``, ``retry``, ``failed`` or ``gone`` for an answer's status (None: no
    answer: a timeout or a connection error; `refused`: the address guard refused it)."""
    if refused:
        return FAILED
    if status is None:
        return RETRY
    if 200 <= status < 300:
        return DELIVERED
    if status == 410:
        return GONE
    if status in (408, 429) or status >= 500:
        return RETRY
    return FAILED


def retry_after(value: str | None, now: float, cap: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (None when absent or unreadable)."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # (isdigit alone also takes "²", which float refuses)
        return min(float(text), cap)
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if moment is None:
        return None
    return max(0.0, min(moment.timestamp() - now, cap))


@dataclass(frozen=True)
class Schedule:
    delays: Sequence[float]
    jitter: float = 0.2

    @property
    def attempts(self) -> int:
        """Attempts in all: the first one and one per delay."""
        return len(self.delays) + 1

    def next_delay(
        self, retry_index: int, asked: float | None = None, rng: random.Random | None = None
    ) -> float | None:
        """Seconds until retry number `retry_index` + 1 (None: the schedule is used up);
        never sooner than `asked` (a Retry-After)."""
        if retry_index >= len(self.delays):
            return None
        base = float(self.delays[retry_index])
        spread = (rng or random).uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        delay = max(0.0, base * (1.0 + spread))
        return max(delay, asked) if asked is not None else delay
