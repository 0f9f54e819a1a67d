"""The HTTP connection under `MAILClient`: session, headers, timeouts, errors.

Every request goes through `_open` (status checked, errors raised as `MAILClientError`) and,
for JSON routes, `_request_json`; see `mail.client` for the error contract.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import aiohttp

from mail.client_config import ClientConfig, load_client_config
from mail.client_sse import describe_error, preview

logger = logging.getLogger("mail.client")

IDLE_CONNECTION_REUSE = 4.0  # seconds


def _user_agent() -> str:
    from mail.version import __version__

    return f"MAIL-Client/{__version__} (python; aiohttp)"


class MAILClientError(RuntimeError):
    """The server answered with an HTTP error status; `detail` is its explanation."""

    def __init__(self, status: int, detail: Any, method: str, path: str) -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
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
        base_url: str,
        api_key: str | None = None,
        session: aiohttp.ClientSession | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        if not base_url or not base_url.strip():
            raise ValueError("base_url must be a non-empty URL such as http://localhost:8000")
        self.base_url = base_url.strip().rstrip("/")
        self.api_key = api_key
        self._explicit_config = config is not None
        self.config = config if config is not None else load_client_config()
        self._session = session
        self._owns_session = session is None
        # Filled by MAILClient.login(); the REPL shows them in its prompt.
        self.user_role: str | None = None
        self.user_id: str | None = None

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        self._ensure_session()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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

    def _build_headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": _user_agent()}
        if self.api_key:
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

    # ----------------------------------------------------------------- transport

    async def _open(
        self,
        method: str,
        path: str,
        *,
        payload: Any = None,
        params: Mapping[str, str] | None = None,
        accept: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """Send a request; return the response once its status is known to be < 400."""
        session = self._ensure_session()
        url = f"{self.base_url}{path}"
        logger.log(self._log_level, "-> %s %s", method, url)
        kwargs: dict[str, Any] = {"headers": self._build_headers({"Accept": accept})}
        if payload is not None:
            kwargs["json"] = payload
        if params:
            kwargs["params"] = params
        timeout = self._request_timeout()
        if timeout is not None:
            kwargs["timeout"] = timeout
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
            raise MAILClientError(response.status, _detail_of(body), method, path)
        return response

    async def _request_json(
        self,
        method: str,
        path: str,
        *,
        payload: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> Any:
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
            raise RuntimeError(
                f"MAIL client request failed: {method} {path}: {describe_error(exc)}"
            ) from exc
        finally:
            response.release()


def _decode(raw: bytes, charset: str | None) -> str:
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:  # the server named a charset Python does not know
        return raw.decode("utf-8", errors="replace")
