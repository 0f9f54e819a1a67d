"""`MAILClient`: an asyncio client (aiohttp) for every route of a MAIL server.

Error contract, the same for every method:

- the server answered with a status >= 400 → `MAILClientError` (a RuntimeError) carrying the
  status and the server's `detail`;
- the request never got an answer (refused connection, DNS, timeout, dropped stream) →
  RuntimeError, with the aiohttp/timeout exception chained as its cause;
- the server answered 2xx but not with JSON → ValueError naming the content type and showing
  the start of the body.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal

import aiohttp

from mail.client_config import ClientConfig, load_client_config
from mail.client_sse import MAILEventStream, describe_error, preview

__all__ = ["ClientConfig", "MAILClient", "MAILClientError", "MAILEventStream"]

logger = logging.getLogger("mail.client")


IDLE_CONNECTION_REUSE = 4.0  # seconds


def _user_agent() -> str:
    from mail.version import __version__

    return f"MAIL-Client/{__version__} (python; aiohttp)"


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


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


class MAILClient:
    """Async client for a MAIL server; use `async with MAILClient(url, api_key) as client:`."""

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
        # Filled by login(); the REPL shows them in its prompt.
        self.user_role: str | None = None
        self.user_id: str | None = None

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> MAILClient:
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
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RuntimeError(
                f"MAIL client request failed: {method} {path}: {describe_error(exc)}"
            ) from exc
        finally:
            response.release()
        text = _decode(raw, response.charset)
        content_type = response.headers.get("Content-Type", "(none)")
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"expected JSON from {method} {path} but got content type {content_type!r}; "
                f"body: {preview(text) or '(empty)'}"
            ) from exc

    # ----------------------------------------------------------------- service and identity

    async def ping(self) -> dict[str, Any]:
        """GET / — server name, protocol version, swarm info, uptime."""
        return await self._request_json("GET", "/")  # type: ignore[no-any-return]

    async def get_health(self) -> dict[str, Any]:
        """GET /health — `{status, swarm_name, timestamp}`; public."""
        return await self._request_json("GET", "/health")  # type: ignore[no-any-return]

    async def update_health(self, status: str) -> dict[str, Any]:
        """POST /health (admin) — set the status other swarms see."""
        return await self._request_json("POST", "/health", payload={"status": status})  # type: ignore[no-any-return]

    async def get_whoami(self) -> dict[str, Any]:
        """GET /whoami — the caller's `{id, role}` (some servers say `username` for `id`)."""
        return await self._request_json("GET", "/whoami")  # type: ignore[no-any-return]

    async def get_status(self) -> dict[str, Any]:
        """GET /status — swarm readiness and whether the caller's instance is running."""
        return await self._request_json("GET", "/status")  # type: ignore[no-any-return]

    async def login(self, api_key: str) -> dict[str, Any]:
        """Use `api_key` from now on and check it with GET /whoami; remembers role and id.

        On failure the key is forgotten (the previous identity too) and RuntimeError is raised.
        """
        self.api_key = api_key
        try:
            identity = await self._register_user_info()
        except (RuntimeError, ValueError) as exc:
            self.logout()
            raise RuntimeError(f"MAIL client login failed: {exc}") from exc
        return identity

    def logout(self) -> None:
        """Forget the API key and identity (local only: API keys have no server session)."""
        self.api_key = None
        self.user_role = None
        self.user_id = None

    async def _register_user_info(self) -> dict[str, Any]:
        identity = await self.get_whoami()
        if not isinstance(identity, dict):
            raise ValueError(f"GET /whoami returned {type(identity).__name__}, not an object")
        self.user_role = identity.get("role")
        user_id = identity.get("id", identity.get("username"))
        self.user_id = None if user_id is None else str(user_id)
        return identity

    # ----------------------------------------------------------------- messaging

    def _message_payload(
        self,
        body: str,
        subject: str,
        msg_type: str,
        entrypoint: str | None,
        task_id: str | None,
        resume_from: str | None,
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"subject": subject, "body": body, "msg_type": msg_type}
        payload.update(
            _drop_none({"entrypoint": entrypoint, "task_id": task_id, "resume_from": resume_from})
        )
        if kwargs:
            payload["kwargs"] = kwargs
        return payload

    async def post_message(
        self,
        body: str,
        subject: str = "New Message",
        msg_type: Literal["request", "response", "broadcast", "interrupt"] = "request",
        *,
        entrypoint: str | None = None,
        show_events: bool = False,
        task_id: str | None = None,
        resume_from: Literal["user_response", "breakpoint_tool_call"] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """POST /message and wait for the task's answer: `{"response": ..., "events": ...}`.

        Extra keyword arguments (e.g. `breakpoint_tool_call_result`, `max_steps`) travel in the
        body's `kwargs` object.
        """
        payload = self._message_payload(
            body, subject, msg_type, entrypoint, task_id, resume_from, kwargs
        )
        payload["show_events"] = show_events
        return await self._request_json("POST", "/message", payload=payload)  # type: ignore[no-any-return]

    def post_message_stream(
        self,
        body: str,
        subject: str = "New Message",
        msg_type: Literal["request", "response", "broadcast", "interrupt"] = "request",
        *,
        entrypoint: str | None = None,
        task_id: str | None = None,
        resume_from: Literal["user_response", "breakpoint_tool_call"] | None = None,
        **kwargs: Any,
    ) -> MAILEventStream:
        """POST /message with `stream: true`; iterate the result for ServerSentEvent objects.

        Both `stream = await client.post_message_stream(...)` (the request is sent, and HTTP
        errors raised, by the await) and `async for event in client.post_message_stream(...)`
        work. Leaving the loop early closes the connection; the server keeps running the task.
        """
        payload = self._message_payload(
            body, subject, msg_type, entrypoint, task_id, resume_from, kwargs
        )
        payload["stream"] = True
        return MAILEventStream(
            lambda: self._open("POST", "/message", payload=payload, accept="text/event-stream"),
            "POST /message",
        )

    async def get_tasks(self) -> dict[str, Any]:
        """GET /tasks — every task of the caller, keyed by task id."""
        return await self._request_json("GET", "/tasks")  # type: ignore[no-any-return]

    async def get_task(self, task_id: str) -> dict[str, Any]:
        """GET /task — one task record.

        The id goes both in a JSON body (the documented form) and in `?task_id=` (which
        proxies that drop GET bodies still forward).
        """
        return await self._request_json(  # type: ignore[no-any-return]
            "GET", "/task", payload={"task_id": task_id}, params={"task_id": task_id}
        )

    # ----------------------------------------------------------------- swarm registry

    async def get_swarms(self) -> dict[str, Any]:
        """GET /swarms — the public swarms the server knows."""
        return await self._request_json("GET", "/swarms")  # type: ignore[no-any-return]

    async def register_swarm(
        self,
        name: str,
        base_url: str,
        *,
        auth_token: str | None = None,
        volatile: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """POST /swarms (admin) — add a remote swarm to the server's registry."""
        payload = _drop_none(
            {
                "name": name,
                "base_url": base_url,
                "auth_token": auth_token,
                "volatile": volatile,
                "metadata": metadata,
            }
        )
        return await self._request_json("POST", "/swarms", payload=payload)  # type: ignore[no-any-return]

    async def dump_swarm(self) -> dict[str, Any]:
        """GET /swarms/dump (admin) — have the server log its swarm template."""
        return await self._request_json("GET", "/swarms/dump")  # type: ignore[no-any-return]

    async def load_swarm_from_json(self, swarm_json: str) -> dict[str, Any]:
        """POST /swarms/load (admin) — replace the template with ONE swarm object (JSON text)."""
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/swarms/load", payload={"json": swarm_json}
        )

    # ----------------------------------------------------------------- interswarm

    async def send_interswarm_message(
        self,
        body: str,
        user_token: str,
        subject: str | None = None,
        targets: list[str] | None = None,
        msg_type: Literal["request", "broadcast"] | None = None,
        task_id: str | None = None,
        routing_info: dict[str, Any] | None = None,
        stream: bool | None = None,
        ignore_stream_pings: bool | None = None,
    ) -> dict[str, Any]:
        """POST /interswarm/message — have the caller's instance message agents of other swarms."""
        if isinstance(targets, str):
            raise TypeError("targets must be a list of 'agent@swarm' strings, not one string")
        payload = _drop_none(
            {
                "body": body,
                "user_token": user_token,
                "subject": subject,
                "targets": targets,
                "msg_type": msg_type,
                "task_id": task_id,
                "routing_info": routing_info,
                "stream": stream,
                "ignore_stream_pings": ignore_stream_pings,
            }
        )
        return await self._request_json("POST", "/interswarm/message", payload=payload)  # type: ignore[no-any-return]

    async def post_interswarm_message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Deliver interswarm traffic.

        A `MAILInterswarmMessage` envelope (it has `payload` and `source_swarm`) is what one
        swarm sends another: it goes to POST /interswarm/forward as `{"message": envelope}`
        (agent role). Any other dict is taken to be a POST /interswarm/message body
        (`user_token`, `body`, `targets`, ...) and posted as is.
        """
        if _is_interswarm_envelope(message):
            return await self._request_json(  # type: ignore[no-any-return]
                "POST", "/interswarm/forward", payload={"message": dict(message)}
            )
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/interswarm/message", payload=dict(message)
        )

    async def post_interswarm_response(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """POST /interswarm/back (agent role) — return an envelope to the swarm owning its task."""
        if not _is_interswarm_envelope(message):
            raise ValueError(
                "post_interswarm_response expects a MAILInterswarmMessage envelope "
                "(with message_id, source_swarm, target_swarm, payload, ...)"
            )
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/interswarm/back", payload={"message": dict(message)}
        )

    # ----------------------------------------------------------------- debug

    async def debug_post_responses(
        self,
        input: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        instructions: str | None = None,
        previous_response_id: str | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """POST /responses (server in debug mode) — returns an `openai...Response`."""
        payload: dict[str, Any] = {"input": input, "tools": tools}
        payload.update(
            _drop_none(
                {
                    "instructions": instructions,
                    "previous_response_id": previous_response_id,
                    "tool_choice": tool_choice,
                    "parallel_tool_calls": parallel_tool_calls,
                }
            )
        )
        if kwargs:
            payload["kwargs"] = kwargs
        result = await self._request_json("POST", "/responses", payload=payload)
        if isinstance(result, str):
            # Servers that return `Response.model_dump_json()` send a JSON-encoded string.
            try:
                result = json.loads(result)
            except ValueError as exc:
                raise ValueError(
                    f"POST /responses returned a non-JSON string: {preview(result)}"
                ) from exc
        return _as_openai_response(result)


def _as_openai_response(data: Any) -> Any:
    try:
        from openai.types.responses import Response
    except ImportError:  # openai is optional for the client; hand back the plain dict
        return data
    from pydantic import ValidationError

    try:
        return Response.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"POST /responses did not return an OpenAI Response: {exc}") from exc


def _decode(raw: bytes, charset: str | None) -> str:
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:  # the server named a charset Python does not know
        return raw.decode("utf-8", errors="replace")


def _is_interswarm_envelope(message: Mapping[str, Any]) -> bool:
    return isinstance(message, Mapping) and "payload" in message and "source_swarm" in message
