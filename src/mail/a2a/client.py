"""Talk to any A2A agent (a MAIL server's `/a2a` included) from Python, for testing."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class A2AReply:
    state: str  # completed, input-required, failed, ... or "message" for a plain reply
    text: str
    task_id: str = ""
    context_id: str = ""
    data: list[Any] = field(default_factory=list)


async def _send_once(url: str, request: Any, api_key: str | None, timeout: float) -> Any:
    from a2a.client import ClientConfig, create_client

    async with _http(api_key, timeout) as http:
        client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        try:
            last = None
            async for event in client.send_message(request):
                last = event
        finally:
            await client.close()
    return last


def _transient(exc: BaseException) -> bool:
    """The SDK's error for a send that got no answer, or a 502/503/504 from a proxy."""
    cause = exc.__cause__
    if isinstance(cause, httpx.TransportError):
        return True
    return isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code in (
        502,
        503,
        504,
    )


def _http(api_key: str | None, timeout: float) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(headers=headers, timeout=timeout)


def user_message(
    text: str = "",
    data: dict[str, Any] | None = None,
    *,
    context_id: str | None = None,
    task_id: str | None = None,
) -> Any:
    """A ``SendMessageRequest`` from the user: a text part and/or a data part."""
    from a2a.helpers.proto_helpers import new_data_part, new_text_part
    from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest

    parts = ([new_text_part(text)] if text else []) + ([new_data_part(data)] if data else [])
    message = Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=parts,
        context_id=context_id or "",
        task_id=task_id or "",
    )
    return SendMessageRequest(message=message)


async def a2a_card(url: str, *, timeout: float = 30.0) -> dict[str, Any]:
    """The agent's card (from ``<url>/.well-known/agent-card.json``) as JSON."""
    from a2a.client import A2ACardResolver
    from google.protobuf.json_format import MessageToDict

    async with _http(None, timeout) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
    return MessageToDict(card)


async def a2a_send(
    url: str,
    text: str,
    *,
    api_key: str | None = None,
    context_id: str | None = None,
    task_id: str | None = None,
    data: dict[str, Any] | None = None,
    timeout: float = 300.0,
    retries: int = 3,
) -> A2AReply:
    """Send one message; a send that got no answer (connection refused, reset, timed out) or
    a 502/503/504 is sent again up to ``retries`` times with the same ``messageId``, which
    the agent takes for the same message (a MAIL server answers with the task it started)."""
    from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts, get_message_text
    from a2a.types.a2a_pb2 import TaskState

    request = user_message(text, data, context_id=context_id, task_id=task_id)
    last: Any = None
    for attempt in range(retries + 1):
        try:
            last = await _send_once(url, request, api_key, timeout)
            break
        except Exception as exc:
            if attempt >= retries or not _transient(exc):
                raise
            await asyncio.sleep(min(0.25 * 2**attempt, 5.0))
    if last is None:
        return A2AReply("no-answer", "")
    if last.HasField("message"):
        msg = last.message
        return A2AReply(
            "message", get_message_text(msg), msg.task_id, msg.context_id, get_data_parts(msg.parts)
        )
    task = last.task
    state = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
    status = task.status.message if task.status.HasField("message") else None
    texts = [get_artifact_text(a) for a in task.artifacts]
    said = get_message_text(status) if status is not None else ""
    text_out = said if state != "completed" or not any(texts) else "\n".join(t for t in texts if t)
    return A2AReply(
        state.replace("_", "-"),
        text_out,
        task.id,
        task.context_id,
        get_data_parts(status.parts) if status is not None else [],
    )


class A2AClientMethods:
    """What ``MAILClient`` gains: A2A calls to its server (or any A2A agent) and task cancel.

    Needs ``base_url``, ``api_key`` and ``_request_json`` of the client it is mixed into.
    """

    base_url: str
    api_key: str | None

    async def a2a_card(self, url: str | None = None) -> dict[str, Any]:
        """The Agent Card of ``url`` (default: this client's server)."""
        return await a2a_card(url or self.base_url)

    async def a2a_send(
        self, text: str, url: str | None = None, api_key: str | None = None, **kwargs: Any
    ) -> A2AReply:
        """Send ``text`` over A2A to ``url`` (default: this server, with this client's key)."""
        if api_key is None and url is None:
            api_key = self.api_key  # this server's key goes to this server only
        policy = getattr(self, "retry_policy", None)
        if policy is not None:
            kwargs.setdefault("retries", policy.retries)
        return await a2a_send(url or self.base_url, text, api_key=api_key, **kwargs)

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        """POST /task/cancel — stop one of your tasks."""
        request = self._request_json  # type: ignore[attr-defined]
        return await request("POST", "/task/cancel", payload={"task_id": task_id}, starts_work=True)  # type: ignore[no-any-return]
