"""Outbound HTTP for the stdlib actions, with an address guard against SSRF.

Each resolved address is checked, then the socket is opened to that checked address (no DNS
rebinding window); every redirect hop is checked; through an environment proxy the target is
checked before the request is handed over. Non-global addresses are refused unless listed in
``[stdlib.net] allowed_hosts``.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from typing import Any, ClassVar

import anyio
import httpcore
import httpx

from mail.config import StdlibHttpConfig, StdlibNetConfig
from mail.stdlib.netpolicy import (
    AddressPolicy,
    AddressRefused,
    IPAddress,
    IPNetwork,
    resolve,
    shared_ssl_context,
)

__all__ = [
    "AddressRefused",
    "AddressPolicy",
    "GuardedTransport",
    "IPAddress",
    "IPNetwork",
    "guarded_client",
    "resolve",
    "shared_ssl_context",
]


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that resolves, checks, then connects to the checked address.

    ``core`` is the httpcore module in use: ``httpcore`` for httpx, ``httpcore2`` for the
    httpx2 fork the mcp SDK is built on (same interface, separate classes).
    """

    def __init__(self, policy: AddressPolicy, core: Any = httpcore) -> None:
        self._policy = policy
        self._core = core
        self._inner = core.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                resolved = await resolve(host, port, self._core)
        except TimeoutError as exc:
            raise self._core.ConnectTimeout(f"resolving {host} timed out") from exc
        addresses = self._policy.check(host, resolved)
        last: Exception | None = None
        for ip in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(ip), port, timeout, local_address, socket_options
                )
            except (self._core.ConnectError, self._core.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("unix sockets are not reachable from stdlib actions")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _direct_transport(policy: AddressPolicy, http: Any, core: Any) -> Any:
    """httpx's transport with its connection pool rebuilt on the guarded backend.

    httpx has no public hook for the network backend, so the pool it builds is replaced
    right after construction; the request/response mapping of the transport is kept.
    """
    context = shared_ssl_context()
    transport = http.AsyncHTTPTransport(verify=context, trust_env=False)
    transport._pool = core.AsyncConnectionPool(
        ssl_context=context, network_backend=GuardedBackend(policy, core)
    )
    return transport


class GuardedRouting:
    """Routes each request directly (guarded backend) or through an environment proxy."""

    http: ClassVar[Any] = httpx
    core: ClassVar[Any] = httpcore

    def __init__(self, policy: AddressPolicy, trust_env: bool = True) -> None:
        self.policy = policy
        self.trust_env = trust_env
        self._direct: Any = None
        self._proxied: dict[str, Any] = {}

    def _proxy_for(self, url: Any) -> str | None:
        if not self.trust_env:
            return None
        proxies = urllib.request.getproxies_environment()
        proxy = proxies.get(url.scheme) or proxies.get("all")
        if not proxy or urllib.request.proxy_bypass(url.host):
            return None
        return proxy

    async def handle_async_request(self, request: Any) -> Any:
        if request.url.scheme not in ("http", "https"):
            raise AddressRefused(f"unsupported URL scheme '{request.url.scheme}'")
        proxy = self._proxy_for(request.url)
        if proxy is None:
            if self._direct is None:
                self._direct = _direct_transport(self.policy, self.http, self.core)
            return await self._direct.handle_async_request(request)
        host = request.url.host
        self.policy.check(host, await resolve(host, request.url.port or 0, self.core))
        transport = self._proxied.get(proxy)
        if transport is None:
            transport = self._proxied[proxy] = self.http.AsyncHTTPTransport(
                proxy=proxy, verify=shared_ssl_context(), trust_env=False
            )
        return await transport.handle_async_request(request)

    async def aclose(self) -> None:
        if self._direct is not None:
            await self._direct.aclose()
        for transport in self._proxied.values():
            await transport.aclose()


class GuardedTransport(GuardedRouting, httpx.AsyncBaseTransport):
    """The guarded transport for httpx clients."""


def guarded_client(
    net: StdlibNetConfig,
    http: StdlibHttpConfig,
    *,
    follow_redirects: bool = True,
    headers: dict[str, str] | None = None,
) -> httpx.AsyncClient:
    """An httpx client whose every connection passes the address guard."""
    return httpx.AsyncClient(
        transport=GuardedTransport(AddressPolicy.from_config(net), trust_env=net.trust_env),
        # Proxies are handled by the transport; trust_env here would also read .netrc.
        trust_env=False,
        follow_redirects=follow_redirects,
        max_redirects=http.max_redirects,
        timeout=httpx.Timeout(http.read_timeout, connect=http.connect_timeout),
        # Only the encodings mail.stdlib.http.bounded can inflate under the size cap.
        headers={"Accept-Encoding": "gzip, deflate", **(headers or {})},
    )
