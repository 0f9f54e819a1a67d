"""A2A SDK clients for the bridge tests: bearer key on every request, text/data messages."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types.a2a_pb2 import SendMessageRequest, StreamResponse

from mail.a2a.client import user_message


@contextlib.asynccontextmanager
async def a2a_client(
    base_url: str,
    key: str | None,
    *,
    streaming: bool = True,
    polling: bool = False,
    binding: str = "JSONRPC",
) -> AsyncIterator[Client]:
    """The SDK's client for the card at ``base_url``, speaking ``binding`` (JSONRPC or
    HTTP+JSON, one of the card's interfaces)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(headers=headers, timeout=30.0) as http:
        config = ClientConfig(
            streaming=streaming,
            polling=polling,
            httpx_client=http,
            supported_protocol_bindings=[binding],
        )
        client = await create_client(base_url, config)
        try:
            yield client
        finally:
            await client.close()


def message(
    text: str = "",
    data: dict[str, Any] | None = None,
    *,
    context_id: str | None = None,
    task_id: str | None = None,
) -> SendMessageRequest:
    return user_message(text, data, context_id=context_id, task_id=task_id)  # type: ignore[no-any-return]


async def collect(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]
