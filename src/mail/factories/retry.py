"""Retrying provider calls: which failures are worth another attempt, and how long to wait.

Retried: timeouts, connection failures, HTTP 408/429 and 5xx. Not retried: other 4xx errors
(bad request, authentication, permission, not found, context too long), because sending the
same request again cannot succeed. Malformed tool-call JSON is retried a couple of times (a
model usually gets it right on a second sample), then reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from mail.factories.errors import LLMCallError, LLMConfigError, MalformedToolCallError

logger = logging.getLogger("mail.factories")

T = TypeVar("T")

_RETRYABLE_STATUS = frozenset({408, 429})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a provider call is retried.

    `delay(n)` is the pause after the n-th failed attempt: exponential from `base_delay`,
    capped at `max_delay`. Tests use a policy with tiny delays.
    """

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 8.0
    malformed_retries: int = 2

    def delay(self, failed_attempts: int) -> float:
        return min(self.max_delay, self.base_delay * (2 ** (failed_attempts - 1)))


def status_code_of(exc: BaseException) -> int | None:
    for attr in ("status_code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def is_retryable(exc: BaseException) -> bool:
    """True when another attempt with the same request may succeed."""
    if isinstance(exc, LLMConfigError):
        return False
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    status = status_code_of(exc)
    if status is not None:
        return status in _RETRYABLE_STATUS or status >= 500
    # Transport-level errors from httpx / aiohttp carry no status code.
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(
        names
        & {"TransportError", "ClientError", "APIConnectionError", "Timeout", "TimeoutException"}
    )


def describe(exc: BaseException) -> str:
    status = status_code_of(exc)
    message = " ".join(str(exc).split())
    if len(message) > 400:
        message = message[:400] + "..."
    prefix = f"HTTP {status} " if status is not None else ""
    return (
        f"{prefix}{type(exc).__name__}: {message}" if message else f"{prefix}{type(exc).__name__}"
    )


def refusal_kind(exc: BaseException) -> str:
    """The ``kind`` of a provider refusal that retrying cannot fix."""
    status = status_code_of(exc)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if status == 401 or "AuthenticationError" in names:
        return "authentication"
    if status == 403 or "PermissionDeniedError" in names:
        return "permission"
    if status == 404 or "NotFoundError" in names or "LLM Provider NOT provided" in str(exc):
        return "unknown_model"
    return "provider_error"


def _advice(kind: str, key_variable: str | None) -> str:
    """What the person running the server can do about a refusal (empty when unclear)."""
    key = key_variable or "the agent's api_key"
    if kind == "authentication":
        return f" The provider refused the API key: check {key}."
    if kind == "permission":
        return f" The API key ({key}) may not use this model: check its permissions."
    if kind == "unknown_model":
        return (
            " Check the model name in the agent's llm (a LiteLLM name such as 'openai/gpt-5-mini')."
        )
    return ""


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    what: str,
    key_variable: str | None = None,
) -> T:
    """Run `attempt` until it succeeds, retrying only failures that are safe to retry.

    `what` names the call in log lines and in the final error (e.g. "agent 'math' calling
    openai/gpt-5-mini").
    """
    malformed = 0
    last: BaseException | None = None
    attempts = 0
    while attempts < policy.max_attempts:
        attempts += 1
        try:
            return await attempt()
        except MalformedToolCallError as exc:
            malformed += 1
            last = exc
            if malformed > policy.malformed_retries:
                raise LLMCallError(
                    f"{what}: the model returned malformed tool arguments {malformed} times; "
                    f"giving up. Last problem: {exc}",
                    kind="malformed_tool_call",
                ) from exc
            logger.warning("%s: %s; asking the model again", what, exc)
            continue
        except Exception as exc:
            last = exc
            if not is_retryable(exc):
                if isinstance(exc, LLMConfigError):
                    raise
                kind = refusal_kind(exc)
                raise LLMCallError(
                    f"{what} failed (not retried): {describe(exc)}.{_advice(kind, key_variable)}",
                    kind=kind,
                ) from exc
            if attempts >= policy.max_attempts:
                break
            pause = policy.delay(attempts)
            logger.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.2fs",
                what,
                attempts,
                policy.max_attempts,
                describe(exc),
                pause,
            )
            await asyncio.sleep(pause)
    assert last is not None
    raise LLMCallError(
        f"{what} failed after {attempts} attempts; last error: {describe(last)}",
        kind="provider_unavailable",
    ) from last
