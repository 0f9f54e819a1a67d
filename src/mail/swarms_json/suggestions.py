"""Did-you-mean suggestions for names typed in configuration files."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["suggest"]

# difflib's similarity ratio below which a candidate is not worth proposing.
SUGGESTION_CUTOFF = 0.6


def suggest(name: str, candidates: Iterable[str]) -> str:
    """Return ``" Did you mean '<closest>'?"`` or ``""`` when nothing is close enough.

    The leading space lets callers append the result directly to a sentence.
    """
    pool = [c for c in candidates if isinstance(c, str)]
    if not isinstance(name, str) or not pool:
        return ""
    matches = difflib.get_close_matches(name, pool, n=1, cutoff=SUGGESTION_CUTOFF)
    return f" Did you mean '{matches[0]}'?" if matches else ""
