"""PostgreSQL out of reach, as the server's callers understand it: `StoreUnavailableError`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from mail.store.postgres import is_transient_error
from mail.store.postgres_schema import refusal_reason
from mail.store.records import StoreUnavailableError

_P = ParamSpec("_P")
_R = TypeVar("_R")


def unavailable_when_unreachable(
    what: str,
) -> Callable[[Callable[_P, Coroutine[Any, Any, _R]]], Callable[_P, Coroutine[Any, Any, _R]]]:
    """A store method whose transient database errors (`is_transient_error`) are raised as
    `StoreUnavailableError` naming `what` the database holds."""

    def decorate(
        method: Callable[_P, Coroutine[Any, Any, _R]],
    ) -> Callable[_P, Coroutine[Any, Any, _R]]:
        @functools.wraps(method)
        async def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return await method(*args, **kwargs)
            except Exception as exc:
                if isinstance(exc, StoreUnavailableError) or not is_transient_error(exc):
                    raise
                raise StoreUnavailableError(
                    f"the database of {what} cannot be reached now ({refusal_reason(exc)}); "
                    "try again later"
                ) from exc

        return call

    return decorate
