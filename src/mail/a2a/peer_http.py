"""The HTTP client of outbound A2A calls: the stdlib address guard and a byte cap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from mail.stdlib._common import settings
from mail.stdlib.http.bounded import ResponseTooLarge
from mail.stdlib.netguard import AddressPolicy, GuardedTransport


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
