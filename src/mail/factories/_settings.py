"""Checking the LLM settings that wrapper factories forward to their inner agent function."""

from __future__ import annotations

import difflib
import inspect
from typing import Any


def check_settings(factory_name: str, settings: dict[str, Any], accepted: Any) -> None:
    """Raise TypeError naming any setting `accepted` (a callable) does not take.

    Built-in factories do not swallow unknown keyword arguments: a typo in `agent_params`
    must fail loudly when the swarm is instantiated, not be ignored.
    """
    params = inspect.signature(accepted).parameters
    known = [name for name in params if name not in ("self", "name", "comm_targets", "tools")]
    unknown = [key for key in settings if key not in params]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    raise TypeError(
        f"{factory_name}() got unexpected parameter(s) {', '.join(hints)}; "
        f"accepted parameters: {', '.join(known)}"
    )
