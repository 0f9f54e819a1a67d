"""`PeerHttp` for agent-driven discovery, over the guard and limits of the http actions."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from mail.net.discovery import PeerHttpError
from mail.stdlib._common import settings
from mail.stdlib.http.actions import guarded_get_json_bytes, transport_error
from mail.stdlib.http.bounded import read_capped
from mail.stdlib.netguard import AddressPolicy, AddressRefused, guarded_client, resolve
from mail.utils.text import loads_valid


def _reason(exc: BaseException) -> str:
    return transport_error(exc, settings()).removeprefix("Error: ")


class GuardedPeerHttp:
    """Discovery requests through the stdlib address guard."""

    async def get_json(self, url: str) -> Any:
        try:
            status, data = await guarded_get_json_bytes(url, settings())
        except Exception as exc:  # noqa: BLE001 - every failure is reported, never raised raw
            raise PeerHttpError(_reason(exc)) from exc
        if status != 200:
            raise PeerHttpError(f"answered HTTP {status}")
        try:
            return loads_valid(data)
        except ValueError:
            raise PeerHttpError("the answer is not JSON") from None

    async def check_address(self, url: str) -> None:
        cfg = settings()
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            addresses = await resolve(host, parts.port or 0)
            AddressPolicy.from_config(cfg.net).check(host, addresses)
        except AddressRefused as exc:
            raise PeerHttpError(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - resolution failures are reported
            raise PeerHttpError(str(exc) or type(exc).__name__) from exc

    async def post_json(self, url: str, body: dict[str, Any], timeout: float) -> tuple[int, str]:
        cfg = settings()
        # No redirects: an envelope is posted where the entry says, or not at all.
        client = guarded_client(cfg.net, cfg.http, follow_redirects=False)
        try:
            async with asyncio.timeout(min(timeout, cfg.http.total_timeout)), client:
                async with client.stream("POST", url, json=body) as response:
                    data = await read_capped(response, cfg.http.max_response_bytes)
                    return response.status_code, data.decode("utf-8", errors="replace")
        except Exception as exc:  # noqa: BLE001 - every failure is reported, never raised raw
            raise PeerHttpError(_reason(exc)) from exc
