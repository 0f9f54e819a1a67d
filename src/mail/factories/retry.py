"""Retrying provider calls: which failures are worth another attempt, and how long to wait."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mail.factories.errors import LLMCallError, LLMConfigError, MalformedToolCallError
from mail.telemetry.model_calls import ModelCallRefused

logger = logging.getLogger("mail.factories")

T = TypeVar("T")

# "Try later": retried up to the policy's attempts, even when they fail the same way.
_TRY_LATER = frozenset({408, 429, 502, 503, 504})
# A 5xx answer in these words is about the request, not the server's health.
_REQUEST_IS_WRONG = re.compile(
    r"invalid|not supported|unsupported|must be|template|jinja|has no attribute|"
    r"validation|malformed|unexpected (?:key|field|argument)|missing credentials",
    re.IGNORECASE,
)
_CONNECT_ERRORS = frozenset(
    {"ConnectionRefusedError", "ConnectError", "ClientConnectorError", "APIConnectionError"}
)
_TIMEOUT_ERRORS = frozenset(
    {"TimeoutError", "TimeoutException", "ReadTimeout", "APITimeoutError", "Timeout"}
)
_TRANSPORT_ERRORS = frozenset({"TransportError", "ClientError", "RemoteProtocolError"})


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


def _chain_names(exc: BaseException) -> set[str]:
    """Class names along the exception, its causes and the classes they derive from."""
    names: set[str] = set()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names.update(cls.__name__ for cls in type(current).__mro__)
        context = None if current.__suppress_context__ else current.__context__
        current = current.__cause__ or context
    return names


def server_words(exc: BaseException) -> str:
    """What the server said, without the client library's wrapping."""
    body = getattr(exc, "body", None)
    text = " ".join(str(exc).split())
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"].strip() or "(an empty error message)"
    for marker in ("Exception - ", "Error - "):
        if marker in text:
            text = text.split(marker, 1)[1]
            break
    text = re.sub(r"^Error code: \d+ - ", "", text)
    parsed: Any = None
    if text[:1] in "{[":
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(text)
                break
            except (ValueError, SyntaxError):
                continue
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        words = error.get("message", error.get("detail")) if isinstance(error, dict) else error
        if isinstance(words, str):
            return words.strip() or "(an empty error message)"
    if len(text) > 400:
        text = text[:400] + "..."
    return text or type(exc).__name__


@dataclass(frozen=True)
class Failure:
    """One failed attempt, classified: whether to retry, what to tell people, and what
    makes two failures "the same"."""

    retry: bool
    text: str
    signature: tuple[Any, ...]
    try_later: bool = False


def classify(exc: BaseException, endpoint: str | None = None) -> Failure:
    where = endpoint or "the provider"
    names = _chain_names(exc)
    status = status_code_of(exc)
    if isinstance(exc, LLMConfigError):
        return Failure(False, str(exc), ("config",))
    if names & _TIMEOUT_ERRORS:  # before connection errors: a timeout is one of those too
        text = (
            f"no answer from {where} within the request timeout "
            "(a slow model or server needs a higher request_timeout in the agent's agent_params)"
        )
        return Failure(True, text, ("timeout",))
    if names & _CONNECT_ERRORS:
        return Failure(True, f"cannot connect to {where}", ("connect",))
    if isinstance(exc, ConnectionError) or (status is None and names & _TRANSPORT_ERRORS):
        return Failure(True, f"the connection to {where} failed: {server_words(exc)}", ("io",))
    if status is None:
        return Failure(False, f"{type(exc).__name__}: {server_words(exc)}", ("bug",))
    words = server_words(exc)
    text = f"HTTP {status} from {where}: {words}"
    if status in _TRY_LATER:
        return Failure(True, text, (status, words), try_later=True)
    if status >= 500 and not _REQUEST_IS_WRONG.search(words):
        return Failure(True, text, (status, words))
    return Failure(False, text, (status, words))


def is_retryable(exc: BaseException) -> bool:
    """True when another attempt with the same request may succeed."""
    return classify(exc).retry


def refusal_kind(exc: BaseException) -> str:
    """The ``kind`` of a provider refusal that retrying cannot fix."""
    status = status_code_of(exc)
    names = _chain_names(exc)
    if "Missing credentials" in str(exc):
        return "missing_api_key"
    if "ContextWindowExceededError" in names:
        return "context_window"
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
    if kind == "context_window":
        return (
            " The conversation no longer fits the model's context: give the server a larger "
            "context, or lower the agent's max_tokens."
        )
    return ""


@dataclass(frozen=True)
class Target:
    """Where a call goes, for the words of its errors: the provider's key variable, the
    endpoint (`api_base`) and the API (`completions` or `responses`)."""

    key_variable: str | None = None
    endpoint: str | None = None
    api: str = "completions"

    def refusal(self, exc: BaseException) -> tuple[str, str]:
        """(kind, advice) for a failure retrying cannot fix."""
        kind = refusal_kind(exc)
        if kind == "unknown_model" and self.api == "responses" and self.endpoint:
            if "model" not in server_words(exc).lower():
                return "configuration", (
                    f" {self.endpoint} has no Responses API (/responses): set the agent's "
                    'tool_format to "completions".'
                )
        return kind, _advice(kind, self.key_variable)


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    what: str,
    target: Target | None = None,
) -> T:
    """Run `attempt` until it succeeds, retrying only failures that are safe to retry.

    `what` names the call in log lines and in the final error (e.g. "agent 'math' calling
    openai/gpt-5-mini"); `target` says where the call goes (its errors name it).
    """
    target = target or Target()
    malformed = 0
    attempts = 0
    previous: Failure | None = None
    while True:
        attempts += 1
        try:
            return await attempt()
        except MalformedToolCallError as exc:
            malformed += 1
            if malformed > policy.malformed_retries:
                raise LLMCallError(
                    f"{what}: the model returned malformed tool arguments {malformed} times; "
                    f"giving up. Last problem: {exc}",
                    kind="malformed_tool_call",
                ) from exc
            logger.warning("%s: %s; asking the model again", what, exc)
            attempts -= 1  # a bad sample is not a failed attempt
            continue
        except (LLMConfigError, ModelCallRefused):
            raise
        except Exception as exc:
            failure = classify(exc, target.endpoint)
            if not failure.retry:
                kind, advice = target.refusal(exc)
                raise LLMCallError(
                    f"{what} failed (not retried): {failure.text}.{advice}", kind=kind
                ) from exc
            if previous is not None and not failure.try_later and previous == failure:
                raise LLMCallError(
                    f"{what} failed the same way twice (not retried again): {failure.text}",
                    kind="provider_unavailable",
                ) from exc
            if attempts >= policy.max_attempts:
                raise LLMCallError(
                    f"{what} failed after {attempts} attempts; last error: {failure.text}",
                    kind="provider_unavailable",
                ) from exc
            previous = failure
            pause = policy.delay(attempts)
            logger.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.2fs",
                what,
                attempts,
                policy.max_attempts,
                failure.text,
                pause,
            )
            await asyncio.sleep(pause)
