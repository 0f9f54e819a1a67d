"""A2A agents as interswarm peers: ``<agent>@<peer>`` for a registry entry of kind ``a2a``."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from mail.a2a.peer_updates import (
    PeerTaskFeed,
    Progress,
    UpdateLimits,
    clip_reason,
    state_name,
)
from mail.core.message import create_agent_address, make_message, make_response, utc_now_iso
from mail.net.types import InterswarmError
from mail.stdlib._common import settings
from mail.stdlib.http.bounded import ResponseTooLarge
from mail.stdlib.netguard import AddressPolicy, GuardedTransport
from mail.stdlib.netpolicy import exception_chain

logger = logging.getLogger("mail.a2a")

KIND = "a2a"
CARD_PATH = "/.well-known/agent-card.json"

Deliver = Callable[[dict[str, Any]], Awaitable[None]]
# (the envelope sent, description, extra_data): one update of the peer, as an event there.
Report = Callable[[dict[str, Any], str, dict[str, Any]], Awaitable[None]]


def card_url(base_url: str, metadata: dict[str, Any] | None) -> str:
    given = (metadata or {}).get("card_url")
    return str(given) if given else base_url.rstrip("/") + CARD_PATH


def card_deadline(timeout: float) -> float:
    """Seconds one whole read of an agent card may take: ``timeout`` (the registry's check
    timeout) or ``[stdlib.http] total_timeout``, whichever is shorter. Each step of the read
    also has ``timeout``; this bounds a card that arrives a byte at a time."""
    from mail.stdlib._common import settings

    return min(timeout, settings().http.total_timeout)


async def read_card(http: httpx.AsyncClient, url: str, deadline: float) -> Any:
    """The agent card at ``url``, read within ``deadline`` seconds in all."""
    from a2a.client import A2ACardResolver

    try:
        async with asyncio.timeout(deadline):
            return await A2ACardResolver(http, url, agent_card_path="").get_agent_card()
    except TimeoutError:
        raise TimeoutError(f"reading the card took longer than {deadline:g}s") from None


async def fetch_card_info(swarm_name: str, url: str, timeout: float) -> dict[str, Any]:
    """The registry's view of an A2A agent (as ``fetch_swarm_info`` gives for MAIL peers)."""
    try:
        async with a2a_http(timeout) as http:
            card = await read_card(http, url, card_deadline(timeout))
    except Exception as exc:  # noqa: BLE001 - every failure is a registration error
        raise InterswarmError(
            f"failed to read the A2A agent card at {url}: {exc}", swarm_name=swarm_name
        ) from exc
    return {
        "name": None,  # an agent's card names the agent, not our registry entry
        "version": card.version,
        "description": card.description,
        "keywords": sorted({t for s in card.skills for t in s.tags}),
        "public": False,
    }


def a2a_http(timeout: float, auth: httpx.Auth | None = None) -> httpx.AsyncClient:
    return a2a_http_client(None, timeout, auth)


MAX_WAITING = 10_000

_ConversationKey = tuple[str, str, str]  # (peer, task owner, MAIL task id)


class PeerConversations:
    """Outbound A2A conversations, one per (peer, caller, MAIL task).

    The ``contextId`` sent to a peer is an HMAC of (peer, owner, MAIL task id) under a key drawn
    at server start, shaped as a UUID: callers with equal task ids never share a conversation,
    and the peer learns neither. A peer task waiting for input (``input-required``) is kept per
    (peer, owner, task), at most ``MAX_WAITING`` (oldest forgotten first).
    """

    def __init__(self, max_waiting: int = MAX_WAITING) -> None:
        self._secret = secrets.token_bytes(32)
        self._max_waiting = max_waiting
        self._waiting: OrderedDict[_ConversationKey, str] = OrderedDict()

    def context_id(self, peer: str, owner: str, task_id: str) -> str:
        """The ``contextId`` of this caller's task in its conversation with ``peer``."""
        text = "\0".join((peer, owner, task_id)).encode("utf-8")
        digest = hmac.new(self._secret, text, hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def take_waiting(self, peer: str, owner: str, task_id: str) -> str:
        """The peer's task waiting for this caller's task to answer ('' when none); the next
        message answers it, so it is no longer waiting."""
        return self._waiting.pop((peer, owner, task_id), "")

    def wait(self, peer: str, owner: str, task_id: str, peer_task_id: str) -> None:
        """The peer's task ``peer_task_id`` asks this caller's task for input."""
        key = (peer, owner, task_id)
        self._waiting.pop(key, None)
        self._waiting[key] = peer_task_id
        while len(self._waiting) > self._max_waiting:
            self._waiting.popitem(last=False)


class A2APeers:
    """Sends envelopes to A2A agents and delivers their answers back (one per server)."""

    def __init__(
        self, deliver: Deliver, report: Report | None = None, limits: UpdateLimits | None = None
    ) -> None:
        self._deliver = deliver
        self._report = report
        self._limits = limits or UpdateLimits()
        # Per (peer, caller, MAIL task): the context sent, the peer's task waiting for input.
        self._conversations = PeerConversations()
        # peer -> (card URL, card): read once, again after a failure or a new registration.
        self._cards: dict[str, tuple[str, Any]] = {}

    async def send(
        self, router: Any, endpoint: dict[str, Any], envelope: dict[str, Any], token: str | None
    ) -> dict[str, Any]:
        swarm = endpoint["swarm_name"]
        subject = str(envelope["payload"].get("subject") or "")
        if subject.startswith("::"):
            # Runtime notices (the task ended here, ...) mean nothing to an A2A agent; an A2A
            # task waiting for input stays open, since the MAIL task may be continued.
            return {"status": "success", "a2a_state": "not forwarded"}
        try:
            async with asyncio.timeout(router.request_timeout):
                outcome = await self._exchange(endpoint, envelope, token, router.request_timeout)
        except InterswarmError:
            raise
        except TimeoutError as exc:
            raise InterswarmError(
                f"A2A agent '{swarm}' did not answer within {router.request_timeout:g}s",
                swarm_name=swarm,
            ) from exc
        except Exception as exc:  # noqa: BLE001 - SDK, guard and cap errors alike
            self._cards.pop(swarm, None)
            if any(isinstance(seen, httpx.ConnectError) for seen in exception_chain(exc)):
                reason = f"cannot connect to A2A agent '{swarm}' at {endpoint['base_url']}"
                router._mark_unreachable(swarm, reason)
                raise InterswarmError(reason, swarm_name=swarm) from exc
            said = clip_reason(str(exc) or type(exc).__name__, self._limits.max_chars)
            raise InterswarmError(f"A2A agent '{swarm}' failed: {said}", swarm_name=swarm) from exc
        await self._deliver(self._answer(envelope, swarm, *outcome))
        return {"status": "success", "a2a_state": outcome[2]}

    async def _exchange(
        self, endpoint: dict[str, Any], envelope: dict[str, Any], token: str | None, timeout: float
    ) -> tuple[str, str, str]:
        from a2a.client import ClientConfig, create_client

        from mail.a2a.client import user_message

        payload = envelope["payload"]
        swarm = endpoint["swarm_name"]
        task_id = payload["task_id"]
        caller = (swarm, str(envelope["task_owner"]), task_id)
        waiting = self._conversations.take_waiting(*caller)
        url = card_url(endpoint["base_url"], endpoint.get("metadata"))
        auth = None
        if token:
            auth = OriginBearer(token, [endpoint["base_url"], url])
        recipient = str((payload.get("recipient") or {}).get("address", "agent"))
        feed = PeerTaskFeed(f"{recipient.partition('@')[0] or 'agent'}@{swarm}", self._limits)
        async with a2a_http(timeout, auth) as http:
            cached = self._cards.get(swarm)
            if cached is not None and cached[0] == url:
                card = cached[1]
            else:
                card = await read_card(http, url, card_deadline(timeout))
                self._cards[swarm] = (url, card)
            # The SDK streams only when the card says the agent can (else one blocking send).
            config = ClientConfig(streaming=card.capabilities.streaming, httpx_client=http)
            client = await create_client(card, config)
            try:
                request = user_message(
                    payload.get("body") or "(empty message)",
                    context_id=self._conversations.context_id(*caller),
                    task_id=waiting,
                )
                events = client.send_message(request)
                try:
                    async for event in events:
                        await self._progress(envelope, feed.add(event))
                        if feed.finished:
                            break  # the answer is in; what a peer sends after it is not read
                finally:
                    # The stream's HTTP response closes with `http` at the latest.
                    await events.aclose()  # type: ignore[attr-defined]
                    await self._progress(envelope, feed.overflow())
            finally:
                await client.close()
        return self._outcome(caller, payload.get("subject") or "", feed)

    async def _progress(self, envelope: dict[str, Any], progress: Progress | None) -> None:
        if progress is None or self._report is None:
            return
        try:
            await self._report(envelope, *progress)
        except Exception:  # noqa: BLE001 - a lost progress event must not fail the call
            logger.debug("an A2A progress event was not recorded", exc_info=True)

    def _outcome(
        self, caller: tuple[str, str, str], subject: str, feed: PeerTaskFeed
    ) -> tuple[str, str, str]:
        """(subject, body, A2A state) of the peer's answer; raises for a failed task."""
        from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
        from a2a.types.a2a_pb2 import TaskState

        swarm = caller[0]
        reply = f"Re: {subject}" if subject else "Re:"
        if feed.message is not None:
            return reply, get_message_text(feed.message), "message"
        task = feed.task
        if task is None:
            raise InterswarmError(f"A2A agent '{swarm}' sent no answer", swarm_name=swarm)
        state = task.status.state
        said = get_message_text(task.status.message) if task.status.HasField("message") else ""
        name = state_name(state)
        reason = clip_reason(said, self._limits.max_chars)
        if state in (TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED):
            self._conversations.wait(*caller, task.id)
            return f"Input required: {subject}", said or "(the agent asks for more input)", name
        if state == TaskState.TASK_STATE_COMPLETED:
            texts = [get_artifact_text(a) for a in task.artifacts]
            return reply, "\n".join(t for t in texts if t) or said, name
        if state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
            raise InterswarmError(
                f"A2A agent '{swarm}' stopped answering while its task was {name}",
                swarm_name=swarm,
            )
        raise InterswarmError(
            f"A2A agent '{swarm}' ended the task as {name}" + (f": {reason}" if reason else ""),
            swarm_name=swarm,
        )

    @staticmethod
    def _answer(
        envelope: dict[str, Any], swarm: str, subject: str, body: str, state: str
    ) -> dict[str, Any]:
        payload = envelope["payload"]
        recipient = payload.get("recipient") or {}
        agent = str(recipient.get("address", "agent")).partition("@")[0] or "agent"
        response = make_response(
            payload["task_id"],
            create_agent_address(f"{agent}@{swarm}"),
            dict(payload["sender"]),  # type: ignore[arg-type]
            subject,
            body,
            sender_swarm=swarm,
            recipient_swarm=envelope["source_swarm"],
        )
        message = make_message(response, "response")
        return {
            "message_id": message["id"],
            "source_swarm": swarm,
            "target_swarm": envelope["source_swarm"],
            "timestamp": utc_now_iso(),
            "payload": response,
            "msg_type": "response",
            "auth_token": None,
            "task_owner": envelope["task_owner"],
            "task_contributors": list(envelope["task_contributors"]),
            "metadata": {"a2a_state": state},
        }


# The HTTP client of outbound A2A calls: the stdlib address guard and a byte cap.
class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise ResponseTooLarge(
                    f"the A2A agent answered more than {self._limit} bytes "
                    "([stdlib.http] max_response_bytes)"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedGuardedTransport(GuardedTransport):
    def __init__(self, policy: AddressPolicy, limit: int, trust_env: bool) -> None:
        super().__init__(policy, trust_env=trust_env)
        self._limit = limit

    async def handle_async_request(self, request: Any) -> Any:
        response = await super().handle_async_request(request)
        response.stream = _CappedStream(response.stream, self._limit)
        return response


class OriginBearer(httpx.Auth):
    """A bearer token sent only to the given origins (those the registry entry names).

    A peer's card chooses where its JSON-RPC endpoint is: a card naming another origin gets
    the request, but not the registry's token for the peer.
    """

    def __init__(self, token: str, urls: list[str]) -> None:
        self._header = f"Bearer {token}"
        self._origins = {_origin(httpx.URL(url)) for url in urls}

    def auth_flow(self, request: httpx.Request) -> Any:
        if _origin(request.url) in self._origins:
            request.headers["Authorization"] = self._header
        yield request


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


def a2a_http_client(
    headers: dict[str, str] | None = None, timeout: float = 30.0, auth: httpx.Auth | None = None
) -> httpx.AsyncClient:
    cfg = settings()
    return httpx.AsyncClient(
        auth=auth,
        transport=CappedGuardedTransport(
            AddressPolicy.from_config(cfg.net), cfg.http.max_response_bytes, cfg.net.trust_env
        ),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout, connect=cfg.http.connect_timeout),
        headers={"Accept-Encoding": "identity", **(headers or {})},
    )
