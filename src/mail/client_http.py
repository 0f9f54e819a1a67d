"""The HTTP connection under `MAILClient`: session, headers, timeouts, errors."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self, TypeVar

import aiohttp

from mail.client_config import ClientConfig, load_client_config, retries_problem
from mail.client_retry import (
    RetryPolicy,
    new_idempotency_key,
    retry_after_seconds,
    still_working,
    transport_failure,
)
from mail.client_sse import describe_error, preview

T = TypeVar("T")

logger = logging.getLogger("mail.client")

IDLE_CONNECTION_REUSE = 4.0  # seconds


STILL_WORKING_AT_TIMEOUT = "HTTP 409, the server was still working when the attempt timed out"
# How early an ask's timeout may fire and still be the end of the attempt (not another timer,
# such as a caller's own session's sock_read).
ATTEMPT_END_SLACK = 0.1


class AnswerCutShort(RuntimeError):
    """An accepted answer whose body could not be read (the server had answered)."""


class MAILClientError(RuntimeError):
    """The server answered with an HTTP error status; `detail` is its explanation."""

    def __init__(
        self, status: int, detail: Any, method: str, path: str, retry_after: float | None = None
    ) -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
        # Seconds of the answer's Retry-After header (429, 503, or a 409 "still working").
        self.retry_after = retry_after
        detail_text = detail if isinstance(detail, str) else json.dumps(detail)
        super().__init__(f"HTTP request failed with status code {status}: '{detail_text}'")


def _detail_of(body: str) -> Any:
    try:
        parsed = json.loads(body)
    except ValueError:
        return preview(body) or "(empty body)"
    if isinstance(parsed, dict) and "detail" in parsed:
        return parsed["detail"]
    return parsed


class MAILHTTPConnection:
    """The HTTP side of `MAILClient`: its session, headers, timeouts and the error contract
    (module docstring of `mail.client`); the routes are methods of `MAILClient`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        session: aiohttp.ClientSession | None = None,
        config: ClientConfig | None = None,
        *,
        url: str | None = None,
        retries: int | None = None,
    ) -> None:
        """`retries`: how often a call that starts work is sent again after a transient
        failure, with the same Idempotency-Key (default: `[client] retries`, 3; 0 = never).
        See docs/client.md#retries."""
        if url is not None:  # v1.3's name of the first parameter
            if base_url is not None:
                raise TypeError("give the server's URL once: base_url or url, not both")
            base_url = url
        if not base_url or not base_url.strip():
            raise ValueError("base_url must be a non-empty URL such as http://localhost:8000")
        self.base_url = base_url.strip().rstrip("/")
        self.api_key = api_key
        self._explicit_config = config is not None
        self.config = config if config is not None else load_client_config()
        self._session = session
        self._owns_session = session is None
        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100
        ):  # as [client] retries: a whole number of resends, 0 to 100
            raise ValueError(retries_problem(retries))
        self.retries = retries
        # Filled by MAILClient.login(); the REPL shows them in its prompt.
        self.user_role: str | None = None
        self.user_id: str | None = None

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        self._ensure_session()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP session if this client created it; a caller's session stays open."""
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()
        if self._owns_session:
            self._session = None

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or (self._owns_session and self._session.closed):
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.config.timeout),
                # Reuse an idle connection only while the server surely keeps it open
                # (uvicorn closes idle ones after 5 s). A REPL waiting for input cannot
                # notice the server closing it, and would write into a dead socket.
                connector=aiohttp.TCPConnector(keepalive_timeout=IDLE_CONNECTION_REUSE),
            )
            self._owns_session = True
        return self._session

    def _build_headers(
        self, extra: Mapping[str, str] | None = None, ignore_auth: bool = False
    ) -> dict[str, str]:
        """The headers of every request (v1.3's client guide: subclass and extend this for
        headers of your own); `ignore_auth` leaves out the bearer token, as in v1.3."""
        from mail.version import __version__

        user_agent = f"MAIL-Client/{__version__} (python; aiohttp)"
        headers = {"Accept": "application/json", "User-Agent": user_agent}
        if self.api_key and not ignore_auth:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if extra:
            headers.update(extra)
        return headers

    def _request_timeout(self) -> aiohttp.ClientTimeout | None:
        # A caller-supplied session keeps its own timeout unless a config was passed as well.
        if self._owns_session or self._explicit_config:
            return aiohttp.ClientTimeout(total=self.config.timeout)
        return None

    @property
    def _log_level(self) -> int:
        return logging.INFO if self.config.verbose else logging.DEBUG

    @property
    def retry_policy(self) -> RetryPolicy:
        retries = self.config.retries if self.retries is None else self.retries
        return RetryPolicy(retries, self.config.retry_backoff, self.config.retry_max_delay)

    # ----------------------------------------------------------------- transport

    async def _open(
        self,
        method: str,
        path: str,
        *,
        payload: Any = None,
        params: Mapping[str, str] | None = None,
        accept: str = "application/json",
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> aiohttp.ClientResponse:
        """Send a request; return the response once its status is known to be < 400.

        `timeout`: the seconds this request may take, when less than the configured
        `timeout` (what is left of a retried call's attempt, see `_retrying`)."""
        session = self._ensure_session()
        url = f"{self.base_url}{path}"
        logger.log(self._log_level, "-> %s %s", method, url)
        extra = {"Accept": accept}
        if idempotency_key is not None:
            extra["Idempotency-Key"] = idempotency_key
        kwargs: dict[str, Any] = {"headers": self._build_headers(extra)}
        if payload is not None:
            kwargs["json"] = payload
        if params:
            kwargs["params"] = params
        request_timeout = self._request_timeout()
        if request_timeout is not None:
            if timeout is not None:  # (a total of 0 would mean no limit to aiohttp)
                request_timeout = aiohttp.ClientTimeout(total=max(timeout, 0.001))
            kwargs["timeout"] = request_timeout
        started = time.perf_counter()
        try:
            response = await session.request(method, url, **kwargs)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RuntimeError(
                f"MAIL client request failed: {method} {url}: {describe_error(exc)}"
            ) from exc
        logger.log(
            self._log_level,
            "<- %s %s %s (%.1f ms)",
            response.status,
            method,
            path,
            (time.perf_counter() - started) * 1000,
        )
        if response.status >= 400:
            try:
                body = await response.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                body = f"(error body unreadable: {describe_error(exc)})"
            finally:
                response.release()
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            raise MAILClientError(response.status, _detail_of(body), method, path, retry_after)
        return response

    async def _open_work(
        self,
        method: str,
        path: str,
        *,
        payload: Any = None,
        accept: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """`_open` for a call that starts work: one fresh Idempotency-Key for every attempt,
        transient failures retried (see `mail.client_retry`)."""
        key = new_idempotency_key()
        return await self._retrying(
            method,
            path,
            lambda timeout: self._open(
                method, path, payload=payload, accept=accept, idempotency_key=key, timeout=timeout
            ),
        )

    async def _retrying(
        self, method: str, path: str, attempt: Callable[[float | None], Awaitable[T]]
    ) -> T:
        """`attempt(timeout)` until it succeeds; transient failures sent again (same key).

        Every attempt (the first send, and each retry) has the whole `timeout` of its own,
        counted from when it is sent. Its request may take all of it (`attempt(None)`); a
        409 with `Retry-After` ("still working on the first request with this key") is
        asked again within that attempt, not counted as a retry, each ask getting what is
        left (`attempt(seconds)`). An attempt whose time runs out while the server is still
        working counts as a timeout: sent again while retries are left, else the 409 is
        raised. An ask whose share of the attempt runs out before its answer's status means
        the same (the server was still working when the attempt timed out), so what is
        raised after the last attempt is that 409 (the ask's timeout as its `__cause__`).
        So a call makes at most `retries + 1` attempts of at most `timeout` each, plus the
        waits between them.
        """
        policy = self.retry_policy
        failures = 0
        attempt_ends = time.monotonic() + self.config.timeout
        still_busy: MAILClientError | None = None  # this attempt's last "still working" 409
        while True:
            try:
                # The attempt's first request may take the whole timeout; asks what is left.
                return await attempt(
                    None if still_busy is None else attempt_ends - time.monotonic()
                )
            except MAILClientError as exc:
                if still_working(exc.status, exc.retry_after):
                    wait = policy.delay(0, exc.retry_after)
                    if time.monotonic() + wait < attempt_ends:
                        logger.info(
                            "%s %s: HTTP 409, the server is still working on an earlier "
                            "attempt; asking for its outcome in %.1f s "
                            "(same Idempotency-Key; not a retry)",
                            method,
                            path,
                            wait,
                        )
                        await asyncio.sleep(wait)
                        still_busy = exc
                        continue
                    if failures >= policy.retries:
                        raise
                    failures += 1
                    reason = STILL_WORKING_AT_TIMEOUT
                elif failures < policy.retries and policy.retry_status(exc.status, exc.retry_after):
                    wait = policy.delay(failures, exc.retry_after)
                    failures += 1
                    reason = f"HTTP {exc.status}"
                else:
                    raise
            except RuntimeError as exc:
                cause = exc.__cause__
                if (
                    still_busy is not None
                    and isinstance(cause, TimeoutError)
                    and not isinstance(exc, AnswerCutShort)
                    and time.monotonic() >= attempt_ends - ATTEMPT_END_SLACK
                ):
                    # The ask after a 409 ran out of the attempt's time: still working.
                    if failures >= policy.retries:
                        raise still_busy from cause
                    wait = policy.delay(0, still_busy.retry_after)
                    failures += 1
                    reason = STILL_WORKING_AT_TIMEOUT
                elif cause is None or not transport_failure(cause) or failures >= policy.retries:
                    raise
                else:
                    wait = policy.delay(failures)
                    failures += 1
                    reason = describe_error(cause)
            logger.info(
                "%s %s: %s; sending it again in %.1f s (same Idempotency-Key; retry %d of %d)",
                method,
                path,
                reason,
                wait,
                failures,
                policy.retries,
            )
            await asyncio.sleep(wait)
            # A retry is a new attempt: a whole `timeout` of its own, from now.
            attempt_ends = time.monotonic() + self.config.timeout
            still_busy = None

    async def _request_json(
        self,
        method: str,
        path: str,
        *,
        payload: Any = None,
        params: Mapping[str, str] | None = None,
        starts_work: bool = False,
    ) -> Any:
        """The JSON answer. With `starts_work` the request carries an Idempotency-Key and is
        retried after transient failures (a body that could not be read included)."""
        if starts_work:
            key = new_idempotency_key()

            async def attempt(timeout: float | None) -> tuple[aiohttp.ClientResponse, bytes]:
                answer = await self._open(
                    method,
                    path,
                    payload=payload,
                    params=params,
                    idempotency_key=key,
                    timeout=timeout,
                )
                return answer, await self._read_body(answer, method, path)

            response, raw = await self._retrying(method, path, attempt)
        else:
            response = await self._open(method, path, payload=payload, params=params)
            raw = await self._read_body(response, method, path)
        text = _decode(raw, response.charset)
        content_type = response.headers.get("Content-Type", "(none)")
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"expected JSON from {method} {path} but got content type {content_type!r}; "
                f"body: {preview(text) or '(empty)'}"
            ) from exc

    async def _read_body(self, response: aiohttp.ClientResponse, method: str, path: str) -> bytes:
        """The whole body of an accepted response (then released); a dropped read raises."""
        try:
            return await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AnswerCutShort(
                f"MAIL client request failed: {method} {path}: {describe_error(exc)}"
            ) from exc
        finally:
            response.release()


def _decode(raw: bytes, charset: str | None) -> str:
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:  # the server named a charset Python does not know
        return raw.decode("utf-8", errors="replace")
