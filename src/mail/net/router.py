"""InterswarmRouter: the HTTP transport between swarms."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import aiohttp

from mail.core.compat import AwaitableBool
from mail.core.message import (
    INTERSWARM_MESSAGE_TYPES,
    create_system_address,
    make_message,
    make_response,
    message_recipients,
    new_task_id,
    parse_agent_address,
    utc_now_iso,
)
from mail.net.answers import (
    MAX_PEER_ANSWER_BYTES,
    MAX_PEER_ERROR_BYTES,
    AnswerTooLarge,
    decode,
    read_at_most,
    read_capped,
)
from mail.net.types import Direction, InterswarmError
from mail.telemetry import metrics, tracing
from mail.utils.text import loads_valid

if TYPE_CHECKING:
    from mail.core.message import MAILInterswarmMessage, MAILMessage
    from mail.net.registry import SwarmRegistry

logger = logging.getLogger("mail.net.router")

MessageHandler = Callable[["MAILMessage"], Awaitable[Any] | Any]

# How much of a remote's error body goes into the error message.
# A peer's error text is kept whole up to this many characters (it ends with the reason).
_BODY_EXCERPT = 4000
# v1.3's body fields of POST /interswarm/message that an envelope's routing_info may carry.
_ROUTING_FLAGS = ("stream", "ignore_stream_pings")
# Answers of a reverse proxy whose upstream (the peer) is down or does not answer.
_GATEWAY_DOWN = (502, 504)
# Answers worth sending the same request again for (with the same Idempotency-Key): the peer
# or a proxy in front of it is briefly unavailable. 429 and 409 only with a Retry-After (a
# 409 with one answers a key whose first request the peer is still working on).
_RETRY_STATUSES = frozenset({502, 503, 504})
_RETRY_AFTER_STATUSES = frozenset({409, 429})
# Seconds before the first resend (doubled each time, with jitter), and the longest wait.
RETRY_BACKOFF = 0.25
RETRY_MAX_DELAY = 5.0


def peer_error_text(text: str) -> str:
    """What a peer said went wrong: its JSON ``detail`` whole, else its body's text."""
    try:
        data = loads_valid(text)
    except ValueError:
        data = None
    detail = data.get("detail") if isinstance(data, dict) else None
    said = detail if isinstance(detail, str) else " ".join(text.split())
    if len(said) <= _BODY_EXCERPT:
        return said
    half = _BODY_EXCERPT // 2
    return f"{said[:half]} [...] {said[-half:]}"


def _transient(error: InterswarmError) -> InterswarmError:
    error.transient = True
    return error


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def choose_direction(target_swarm: str, task_contributors: list[str]) -> Direction:
    """`back` when the target already contributes to the task, else `forward`."""
    for contributor in task_contributors:
        _, sep, swarm = contributor.partition("@")
        if sep and swarm == target_swarm:
            return "back"
    return "forward"


class InterswarmRouter:
    """Sends MAIL traffic to remote swarms found in a SwarmRegistry."""

    def __init__(
        self,
        swarm_registry: SwarmRegistry,
        local_swarm_name: str,
        request_timeout: float = 30.0,
        session: aiohttp.ClientSession | None = None,
        retries: int = 2,
    ) -> None:
        """`retries`: how often a request that got no answer, or a 502/503/504 (a 429 or
        409 with Retry-After), is sent again, with the same Idempotency-Key, within
        `request_timeout` (which bounds all attempts together). A 409 with Retry-After to a
        resent request (the peer still runs an earlier attempt) is asked again within
        `request_timeout` without counting against `retries`."""
        if request_timeout <= 0:
            raise ValueError("request_timeout must be positive")
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        self.retries = retries
        self.swarm_registry = swarm_registry
        self.local_swarm_name = local_swarm_name
        self.request_timeout = request_timeout
        self.session = session
        self._owns_session = session is None
        self.message_handlers: dict[str, MessageHandler] = {}
        # Set by the server when it serves A2A (mail.a2a.peer.A2APeers): registry entries of
        # kind "a2a" are A2A agents, reached through the A2A SDK instead of /interswarm/*.
        self.a2a_peers: Any = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the shared HTTP session (a no-op for an injected or already open one)."""
        if self.session is None or self.session.closed:
            if not self._owns_session:
                raise InterswarmError("the HTTP session given to the router is closed")
            self.session = aiohttp.ClientSession()
            logger.debug("interswarm router for '%s' started", self.local_swarm_name)

    async def stop(self) -> None:
        """Close the session if the router opened it."""
        if self._owns_session and self.session is not None:
            await self.session.close()
            self.session = None
            logger.debug("interswarm router for '%s' stopped", self.local_swarm_name)

    def is_running(self) -> AwaitableBool:
        """Whether the HTTP session is open; ``await router.is_running()`` works too (v1.3
        defined it as a coroutine)."""
        return AwaitableBool(self.session is not None and not self.session.closed)

    # ------------------------------------------------------------------ envelopes

    def wrap_message(
        self,
        message: MAILMessage,
        target_swarm: str,
        task_owner: str,
        task_contributors: list[str],
        auth_token: str | None = None,
    ) -> MAILInterswarmMessage:
        """Put a MAIL message into an interswarm envelope addressed to `target_swarm`."""
        msg_type = message["msg_type"]
        if msg_type not in INTERSWARM_MESSAGE_TYPES:
            raise InterswarmError(
                f"cannot send a '{msg_type}' message to another swarm "
                f"(allowed: {', '.join(INTERSWARM_MESSAGE_TYPES)})",
                swarm_name=target_swarm,
            )
        token = auth_token or self.swarm_registry.get_resolved_auth_token(target_swarm)
        envelope: dict[str, Any] = {
            "message_id": message["id"],
            "source_swarm": self.local_swarm_name,
            "target_swarm": target_swarm,
            "timestamp": utc_now_iso(),
            "payload": message["message"],
            "msg_type": msg_type,
            "auth_token": token,
            "task_owner": task_owner,
            "task_contributors": list(task_contributors),
            "metadata": {},
        }
        return envelope  # type: ignore[return-value]

    def resolve_token(self, target_swarm: str, envelope: MAILInterswarmMessage | None) -> str:
        """Bearer token for a request to `target_swarm`."""
        token = self.swarm_registry.get_resolved_auth_token(target_swarm)
        if not token and envelope is not None:
            token = envelope.get("auth_token")
        if not token:
            raise InterswarmError(
                f"authentication token missing for swarm '{target_swarm}'",
                swarm_name=target_swarm,
            )
        return token

    def choose_direction(self, target_swarm: str, task_contributors: list[str]) -> Direction:
        return choose_direction(target_swarm, task_contributors)

    # ------------------------------------------------------------------ sending

    async def send_interswarm(
        self, envelope: MAILInterswarmMessage, direction: Direction
    ) -> dict[str, Any]:
        """POST an envelope to the target's `/interswarm/{direction}`; returns its JSON."""
        if direction not in ("forward", "back"):
            raise ValueError(f"direction must be 'forward' or 'back', got '{direction}'")
        target = envelope["target_swarm"]
        base_url = await self._active_base_url(target)
        endpoint = self.swarm_registry.get_swarm_endpoint(target)
        if endpoint is not None and (endpoint.get("metadata") or {}).get("kind") == "a2a":
            if self.a2a_peers is None:  # the A2A bridge is not installed (cluster mode)
                raise InterswarmError(
                    f"'{target}' is an A2A agent, and A2A peers are not reachable here "
                    "(the A2A bridge is not served in cluster mode)",
                    swarm_name=target,
                )
            token = self.swarm_registry.get_resolved_auth_token(target)
            return await self.a2a_peers.send(self, endpoint, envelope, token)  # type: ignore[no-any-return]
        token = self.resolve_token(target, envelope)
        outgoing = dict(envelope)
        # Receivers that follow the original reject a null auth_token in the envelope.
        if not outgoing.get("auth_token"):
            outgoing["auth_token"] = token
        return await self._post(
            target,
            f"{base_url}/interswarm/{direction}",
            {"message": outgoing},
            token,
            self.request_timeout,
        )

    async def post_interswarm_user_message(
        self,
        base_url_or_swarm: str | MAILInterswarmMessage,
        body: dict[str, Any] | None = None,
        user_token: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST a user/admin message to a remote's `/interswarm/message`; returns its JSON."""
        if isinstance(base_url_or_swarm, dict):
            return await self.post_envelope_as_user_message(base_url_or_swarm)  # type: ignore[no-any-return]
        if body is None:
            raise TypeError("post_interswarm_user_message needs the message body")
        if not user_token:
            raise InterswarmError("user token is required for an interswarm user message")
        if base_url_or_swarm.startswith(("http://", "https://")):
            base_url, label = base_url_or_swarm.rstrip("/"), base_url_or_swarm
        else:
            base_url = await self._active_base_url(base_url_or_swarm)
            label = base_url_or_swarm
        outgoing = dict(body)
        outgoing.setdefault("user_token", user_token)
        return await self._post(
            label,
            f"{base_url}/interswarm/message",
            outgoing,
            user_token,
            timeout if timeout is not None else self.request_timeout,
        )

    async def _active_base_url(self, swarm_name: str) -> str:
        """The swarm's base URL; a swarm marked inactive is checked again first."""
        endpoint = self.swarm_registry.get_swarm_endpoint(swarm_name)
        if endpoint is None:
            raise InterswarmError(f"unknown swarm endpoint: '{swarm_name}'", swarm_name=swarm_name)
        if not endpoint["is_active"]:
            recheck = getattr(self.swarm_registry, "recheck", None)
            problem = await recheck(swarm_name) if recheck is not None else "no health check"
            if problem is not None:
                raise InterswarmError(
                    f"swarm '{swarm_name}' is not active (checked again just now: {problem})",
                    swarm_name=swarm_name,
                )
            endpoint = self.swarm_registry.get_swarm_endpoint(swarm_name) or endpoint
        return endpoint["base_url"]

    async def _post(
        self, swarm: str, url: str, body: dict[str, Any], token: str, timeout: float
    ) -> dict[str, Any]:
        """POST with one Idempotency-Key for every attempt (a peer that knows the header runs
        the request once however often it arrives; one that does not ignores it)."""
        key = f'"{new_task_id()}"'  # time-ordered (UUIDv7): new keys append to a key index
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        attempt = sent = 0
        while True:
            try:
                with interswarm_hop(swarm, url) as hop_headers:  # span, traceparent, metrics
                    sent += 1
                    return await self._post_once(
                        swarm, url, body, token, timeout, hop_headers, key, deadline - loop.time()
                    )
            except InterswarmError as exc:
                if sent > 1 and exc.status == 409 and exc.retry_after is not None:
                    # The peer is still working on an earlier attempt: "not yet", not a
                    # failure. Ask again when it says (not sooner than RETRY_BACKOFF), within
                    # the deadline, without counting it against `retries`.
                    wait: float | None = max(RETRY_BACKOFF, exc.retry_after or 0.0)
                else:
                    wait = self._retry_wait(exc, attempt)
                    attempt += 1
                if wait is None or loop.time() + wait >= deadline:
                    raise
                logger.info("%s; sending it again in %.2fs (retry %d)", exc, wait, attempt)
            await asyncio.sleep(wait)

    def _retry_wait(self, exc: InterswarmError, attempt: int) -> float | None:
        """Seconds before resending after `exc`, or None when it is not to be resent."""
        if attempt >= self.retries or not exc.transient:
            return None
        if exc.retry_after is not None:
            return exc.retry_after
        base = min(RETRY_MAX_DELAY, RETRY_BACKOFF * 2**attempt)
        return base / 2 + random.uniform(0, base / 2)  # noqa: S311 - jitter

    async def _post_once(
        self,
        swarm: str,
        url: str,
        body: dict[str, Any],
        token: str,
        timeout: float,
        hop_headers: dict[str, str],
        idempotency_key: str | None = None,
        remaining: float | None = None,
    ) -> dict[str, Any]:
        """One attempt; `timeout` is the request's budget (named in errors), `remaining`
        what is left of it for this attempt (all of it by default)."""
        session = self.session
        if session is None or session.closed:
            raise InterswarmError("HTTP client session is not open", swarm_name=swarm)
        left = timeout if remaining is None else remaining
        if left <= 0:
            raise InterswarmError(
                f"swarm '{swarm}' did not answer within {timeout:g}s ({url})", swarm_name=swarm
            )
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"MAIL-Interswarm-Router/{self.local_swarm_name}",
            "Authorization": f"Bearer {token}",
        }
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        headers.update(hop_headers)
        try:
            async with session.post(
                url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=left)
            ) as response:
                if 200 <= response.status < 300:
                    text = decode(await read_capped(response, MAX_PEER_ANSWER_BYTES))
                else:
                    # Only the start of an error is shown (peer_error_text): read no more.
                    text = decode((await read_at_most(response, MAX_PEER_ERROR_BYTES))[0])
                if response.status in _GATEWAY_DOWN:
                    # A proxy in front of the peer says the peer itself is unreachable.
                    self._mark_unreachable(
                        swarm, f"swarm '{swarm}' answered HTTP {response.status} ({url})"
                    )
                if not 200 <= response.status < 300:
                    excerpt = peer_error_text(text)
                    summary = f"swarm '{swarm}' answered HTTP {response.status}"
                    if response.reason:
                        summary += f" {response.reason}"
                    if excerpt:
                        summary += f": {excerpt}"
                    retry_after = _retry_after(response.headers.get("Retry-After"))
                    raise InterswarmError(
                        summary,
                        swarm_name=swarm,
                        status=response.status,
                        transient=response.status in _RETRY_STATUSES
                        or (response.status in _RETRY_AFTER_STATUSES and retry_after is not None),
                        retry_after=retry_after,
                    )
        except TimeoutError as exc:
            raise InterswarmError(
                f"swarm '{swarm}' did not answer within {timeout:g}s ({url})", swarm_name=swarm
            ) from exc
        except AnswerTooLarge as exc:
            raise InterswarmError(
                f"swarm '{swarm}' answered too much ({url}): {exc}", swarm_name=swarm
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            reason = f"cannot connect to swarm '{swarm}' at {url}: {exc.strerror or exc}"
            self._mark_unreachable(swarm, reason)
            raise _transient(InterswarmError(reason, swarm_name=swarm)) from exc
        except aiohttp.ClientError as exc:
            error = InterswarmError(
                f"request to swarm '{swarm}' failed: {exc or type(exc).__name__}",
                swarm_name=swarm,
            )
            # No answer came (reset, closed, cut short): the same request may be sent again.
            if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError):
                error = _transient(error)
            raise error from exc
        logger.debug("POST %s -> %d", url, response.status)
        try:
            data = loads_valid(text) if text else {}
        except ValueError:
            return {"raw": text}
        return data if isinstance(data, dict) else {"data": data}

    def _mark_unreachable(self, swarm: str, reason: str) -> None:
        # Other tasks waiting on this swarm learn of it now, not at the next health check.
        mark = getattr(self.swarm_registry, "mark_unreachable", None)
        if mark is not None:
            mark(swarm, reason)

    # ------------------------------------------------------------------ legacy routing API

    def register_message_handler(self, message_type: str, handler: MessageHandler) -> None:
        """Handler for messages whose recipients are local (`route_message`)."""
        self.message_handlers[message_type] = handler

    # ------------------------------------------------------------------ inbound (v1.3)
    async def receive_interswarm_message_forward(self, message: MAILInterswarmMessage) -> None:
        """An envelope starting work here: handed to the ``local_message_handler``."""
        await self._receive_envelope(message, "forward")

    async def receive_interswarm_message_back(self, message: MAILInterswarmMessage) -> None:
        """An envelope answering work of ours: handed to the ``local_message_handler``."""
        await self._receive_envelope(message, "back")

    async def _receive_envelope(self, message: MAILInterswarmMessage, direction: str) -> None:
        # The server takes envelopes through the instance's bridge (net/bridge_inbound.py,
        # with its trust checks); this is v1.3's entry point for code that registered its
        # own handler.
        if message["target_swarm"] != self.local_swarm_name:
            raise ValueError(
                f"received interswarm message for wrong swarm: '{message['target_swarm']}'"
            )
        handler = self.message_handlers.get("local_message_handler")
        if handler is None:
            raise ValueError("no local message handler registered")
        try:
            result = handler(message)  # type: ignore[arg-type]
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            raise ValueError(
                f"router failed to receive interswarm message {direction}: {exc}"
            ) from exc

    async def route_message(
        self,
        message: MAILMessage,
        *,
        task_owner: str | None = None,
        task_contributors: list[str] | None = None,
    ) -> MAILMessage:
        """Deliver local recipients through the registered handler, send remote ones."""
        local, remote = self._split_recipients(message)
        problems: list[str] = []
        if local:
            handler = self.message_handlers.get(message["msg_type"])
            if handler is None:
                problems.append(f"no local handler for '{message['msg_type']}' messages")
            else:
                result = handler(message)
                if inspect.isawaitable(result):
                    await result
        owner = task_owner or f"swarm:{self.local_swarm_name}@{self.local_swarm_name}"
        contributors = task_contributors if task_contributors is not None else [owner]
        for swarm in remote:
            try:
                envelope = self.wrap_message(message, swarm, owner, contributors)
                await self.send_interswarm(envelope, choose_direction(swarm, contributors))
            except InterswarmError as exc:
                problems.append(str(exc))
        if not problems:
            return message
        return self._router_error(message, "; ".join(problems))

    def _split_recipients(self, message: MAILMessage) -> tuple[list[str], list[str]]:
        local: list[str] = []
        remote: list[str] = []
        for recipient in message_recipients(message):
            name, swarm = parse_agent_address(recipient["address"])
            if swarm and swarm != self.local_swarm_name:
                if swarm not in remote:
                    remote.append(swarm)
            else:
                local.append(name)
        return local, remote

    def _router_error(self, message: MAILMessage, reason: str) -> MAILMessage:
        payload: Any = message["message"]
        response = make_response(
            payload["task_id"],
            create_system_address(self.local_swarm_name),
            dict(payload["sender"]),  # type: ignore[arg-type]
            "Router Error",
            f"Your message could not be delivered: {reason}",
            sender_swarm=self.local_swarm_name,
            recipient_swarm=self.local_swarm_name,
        )
        return make_message(response, "response")

    # ------------------------------------------------------------------ outbound (v1.3)
    # v1.3's names, over send_interswarm, wrap_message and post_interswarm_user_message,
    # with v1.3's error type (ValueError).
    async def send_interswarm_message_forward(self, message: MAILInterswarmMessage) -> None:
        """POST an envelope to its target's ``/interswarm/forward`` (a new task there)."""
        await self._send_v13(message, "forward")

    async def send_interswarm_message_back(self, message: MAILInterswarmMessage) -> None:
        """POST an envelope to its target's ``/interswarm/back`` (work it takes part in)."""
        await self._send_v13(message, "back")

    async def _send_v13(self, message: MAILInterswarmMessage, direction: Direction) -> None:
        try:
            await self.send_interswarm(message, direction)
        except Exception as exc:
            raise ValueError(f"failed to send interswarm message {direction}: {exc}") from exc

    def convert_local_message_to_interswarm(
        self,
        message: MAILMessage,
        task_owner: str,
        task_contributors: list[str],
        metadata: dict[str, Any] | None = None,
    ) -> MAILInterswarmMessage:
        """`message` in an envelope for the swarm of its first remote recipient."""
        payload: Any = message["message"]
        recipients = payload.get("recipients") or [payload.get("recipient")]
        swarms = [
            swarm
            for r in recipients
            if isinstance(r, dict)
            for swarm in [parse_agent_address(r.get("address", ""))[1]]
            if swarm
        ]
        if not swarms:
            raise ValueError("the message has no recipient in another swarm (agent@swarm)")
        envelope = self.wrap_message(message, swarms[0], task_owner, task_contributors)
        envelope["metadata"] = dict(metadata or {})
        return envelope

    async def post_envelope_as_user_message(self, message: MAILInterswarmMessage) -> Any:
        """v1.3's ``post_interswarm_user_message(envelope)``: the envelope's request or
        broadcast, sent as a user message to its target's ``/interswarm/message`` with the
        envelope's ``auth_token`` as the user's token; returns the remote's answer."""
        try:
            token = message.get("auth_token")
            if not token:
                raise ValueError("user token is required for interswarm user messages")
            payload: Any = message.get("payload")
            if not isinstance(payload, dict):
                raise ValueError("invalid interswarm payload")
            msg_type = message.get("msg_type")
            if msg_type not in ("request", "broadcast"):
                raise ValueError(
                    f"msg_type '{msg_type}' is not supported for interswarm user messages"
                )
            body = payload.get("body")
            if not isinstance(body, str):
                raise ValueError("body is required for interswarm user messages")
            recipients = payload.get("recipients") or [payload.get("recipient")]
            targets = [r["address"] for r in recipients if isinstance(r, dict) and r.get("address")]
            if not targets:
                raise ValueError("targets are required for interswarm user messages")
            request: dict[str, Any] = {"body": body, "targets": targets, "msg_type": msg_type}
            for key in ("subject", "task_id"):
                if isinstance(payload.get(key), str):
                    request[key] = payload[key]
            routing = payload.get("routing_info")
            if isinstance(routing, dict) and routing:
                request["routing_info"] = routing
                for flag in _ROUTING_FLAGS:
                    if flag in routing:
                        request[flag] = bool(routing[flag])
            return await self.post_interswarm_user_message(message["target_swarm"], request, token)
        except Exception as exc:
            raise ValueError(f"error posting interswarm user message: {exc}") from exc

    def get_routing_stats(self) -> dict[str, Any]:
        """The local swarm's name, how many endpoints are known and active, the handlers."""
        return {
            "local_swarm_name": self.local_swarm_name,
            "total_endpoints": len(self.swarm_registry.get_all_endpoints()),
            "active_endpoints": len(self.swarm_registry.get_active_endpoints()),
            "registered_handlers": list(self.message_handlers),
        }


# One interswarm request: a CLIENT span whose context travels in ``traceparent``, and the
# ``mail_interswarm_requests`` counter per peer and outcome.
@contextmanager
def interswarm_hop(peer: str, url: str) -> Iterator[dict[str, str]]:
    """Yields the headers to add to the request (empty when tracing is off)."""
    headers: dict[str, str] = {}
    span = tracing.start_span(
        f"mail.interswarm {peer}",
        kind="CLIENT",
        attributes={"mail.peer": peer, "url.full": url},
    )
    token: Any = None
    if span is not None:
        token = tracing.attach(span)
        tracing.inject(headers)
    outcome = "ok"
    try:
        yield headers
    except BaseException as exc:
        outcome = "error"
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            outcome = f"http_{status}"
        if span is not None and span.is_recording():
            span.set_attribute("error.type", type(exc).__name__)
        raise
    finally:
        metrics.interswarm_request(peer, outcome)
        if span is not None:
            if span.is_recording():
                span.set_attribute("mail.interswarm.outcome", outcome)
            tracing.detach(token)
            tracing.end_span(span, None if outcome == "ok" else outcome)
