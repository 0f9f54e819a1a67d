"""When `MAILClient` sends a call again, and how long it waits first."""

from __future__ import annotations

import os
import random
import time
import uuid
from dataclasses import dataclass

import aiohttp

RETRY_STATUSES = frozenset({502, 503, 504})
# The longest `Retry-After` the client honours (a server saying "in an hour" is not waited for).
MAX_RETRY_AFTER = 120.0


def new_idempotency_key() -> str:
    """A fresh key as the header carries it: an RFC 8941 string holding a time-ordered UUID
    (version 7: the time in milliseconds, then 74 random bits). Keys sort by the millisecond
    they were made in, so a server that indexes its callers' keys (SQLite, PostgreSQL) adds
    each new one at the end of that index instead of at a random place in it."""
    return f'"{uuid7()}"'


def uuid7() -> uuid.UUID:
    """A version 7 UUID (RFC 9562): 48 bits of Unix time in milliseconds, the version, 12
    random bits, the variant, 62 random bits."""
    millis = time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF
    rand = int.from_bytes(os.urandom(10))
    value = millis << 80 | 0x7 << 76 | (rand >> 64 & 0xFFF) << 64 | 0b10 << 62
    return uuid.UUID(int=value | rand & (1 << 62) - 1)


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds of a `Retry-After` header in the delay-seconds form (dates are not used)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def transport_failure(exc: BaseException) -> bool:
    """The request got no (complete) answer: worth sending again with the same key."""
    return isinstance(
        exc,
        aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | TimeoutError,
    )


@dataclass
class RetryPolicy:
    retries: int = 3
    backoff: float = 0.5
    max_delay: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt `attempt + 1` (`attempt` counts from 0)."""
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER)
        base = min(self.max_delay, self.backoff * (2**attempt))
        return base / 2 + random.uniform(0, base / 2)  # noqa: S311 - jitter, not a secret

    def retry_status(self, status: int, retry_after: float | None) -> bool:
        return status in RETRY_STATUSES or (status == 429 and retry_after is not None)


def still_working(status: int, retry_after: float | None) -> bool:
    """The server's answer to a repeated key whose first request is still under way."""
    return status == 409 and retry_after is not None
