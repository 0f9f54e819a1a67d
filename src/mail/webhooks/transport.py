"""The HTTP side of push delivery: URL checks and one attempt, through the address guard."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from yarl import URL

from mail.config import StdlibNetConfig
from mail.version import __version__
from mail.webhook_settings import WebhooksConfig

SETTING = "[server.webhooks] allowed_hosts"
USER_AGENT = f"MAIL-Webhooks/{__version__}"


class UrlRefused(ValueError):
    """A subscription URL that is malformed or refused by the guard (a 400: a bad value)."""


def parse_url(url: str) -> URL:
    """`url` as the sending client (aiohttp) reads it: its own parser (yarl), so that the
    host checked, bounded and connected to is one and the same. Raises ValueError."""
    return URL(url)


def destination_of(url: str) -> str:
    """``host:port`` of a URL (lower case, default ports filled in): the unit the engine
    bounds in-flight attempts by."""
    parts = parse_url(url)
    return f"{(parts.host or '').lower()}:{parts.port}"


def check_url_form(url: object, max_chars: int) -> str:
    """The URL if it is a well-formed http(s) URL with a host, as the sending client reads
    it (what it would refuse to send is refused now, not retried for a day), in the form it
    sends (scheme and host in lower case, no default port, dot segments resolved, unreserved
    characters decoded, no fragment): two spellings of one URL are one URL, so a task's
    events go to it once; raises UrlRefused."""
    if not isinstance(url, str) or not url.strip():
        raise UrlRefused("parameter 'url' must be a non-empty string")
    url = url.strip()
    if len(url) > max_chars:
        raise UrlRefused(
            f"parameter 'url' is {len(url)} characters; the limit is {max_chars} "
            "([server.webhooks] max_url_chars)"
        )
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise UrlRefused(
            "parameter 'url' contains spaces or control characters; percent-encode them"
        )
    try:
        parts = parse_url(url)
        parts.port  # noqa: B018 - raises on a bad port
        parts.host  # noqa: B018 - raises on a name IDNA cannot read
    except ValueError as exc:
        raise UrlRefused(f"parameter 'url' is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.raw_host:
        raise UrlRefused("parameter 'url' must be an http:// or https:// URL with a host")
    if parts.port == 0:
        raise UrlRefused("parameter 'url' names port 0, which no receiver listens on")
    return str(parts.with_fragment(None))


@dataclass(frozen=True)
class Answer:
    """What one attempt got back (status None: no HTTP answer; see `error`)."""

    status: int | None
    latency_ms: float
    excerpt: str = ""
    error: str | None = None
    retry_after: str | None = None
    refused: bool = False


class GuardedResolver:
    """aiohttp's resolver: every address of a name is checked by the guard before a socket
    is opened to it (the connection goes to the checked address)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[Any]:
        from mail.stdlib.netpolicy import resolve

        addresses = self.policy.check(host, await resolve(host, port))
        return [
            {
                "hostname": host,
                "host": str(ip),
                "port": port,
                "family": socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for ip in addresses
        ]

    async def close(self) -> None:
        return None


class WebhookTransport:
    """aiohttp (a fraction of httpx's CPU per request: each task event may be one POST)
    with the guard in its resolver; IP-literal hosts and proxied targets are checked before
    the request, as the resolver never sees them."""

    def __init__(self, cfg: WebhooksConfig) -> None:
        self.cfg = cfg
        self._policy: Any = None
        self._session: Any = None
        self._aiohttp: Any = None
        # The proxy settings of the environment, read once (reading them scans os.environ).
        self._proxies = urllib.request.getproxies_environment() if cfg.trust_env else {}

    @property
    def policy(self) -> Any:
        """The guard's AddressPolicy (mail.stdlib.netpolicy, imported on first use)."""
        if self._policy is None:
            from mail.stdlib.netpolicy import AddressPolicy

            net = StdlibNetConfig(
                allowed_hosts=list(self.cfg.allowed_hosts),
                allow_private_addresses=self.cfg.allow_private_addresses,
                trust_env=self.cfg.trust_env,
            )
            self._policy = AddressPolicy.from_config(net, SETTING)
        return self._policy

    def warm(self) -> None:
        """Load what the first attempt needs (the guard, the TLS context: tens of
        milliseconds), so it does not land on the event loop then."""
        from mail.stdlib.netpolicy import shared_ssl_context

        self.policy  # noqa: B018
        shared_ssl_context()

    def _client(self) -> Any:
        if self._session is None:
            import aiohttp

            from mail.stdlib.netpolicy import shared_ssl_context

            self._aiohttp = aiohttp
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self.policy),  # type: ignore[arg-type]
                use_dns_cache=False,
                limit=self.cfg.max_in_flight + 8,
                ssl=shared_ssl_context(),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # proxies are chosen (and their targets checked) in post()
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(
                    total=self.cfg.timeout, sock_connect=self.cfg.connect_timeout
                ),
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
            )
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def check_url(self, url: object) -> str:
        """A URL subscriptions may use: well formed, and every address of its host allowed
        by the guard now (it is checked again on every connection). Raises UrlRefused."""
        from mail.stdlib.netpolicy import AddressRefused, resolve

        url = check_url_form(url, self.cfg.max_url_chars)
        parts = parse_url(url)
        host = parts.host or ""
        try:
            async with asyncio.timeout(self.cfg.connect_timeout):
                addresses = await resolve(host, parts.port or 0)
            self.policy.check(host, addresses)
        except AddressRefused as exc:
            raise UrlRefused(f"parameter 'url' is refused: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - resolution errors of every kind
            raise UrlRefused(f"parameter 'url': cannot resolve {host}: {exc}") from None
        return url

    def _proxy_for(self, url: str) -> str | None:
        if not self.cfg.trust_env:
            return None
        parts = parse_url(url)
        proxies = self._proxies
        proxy = proxies.get(parts.scheme) or proxies.get("all")
        if not proxy or urllib.request.proxy_bypass(parts.host or ""):
            return None
        return proxy

    async def _precheck(self, url: str, proxy: str | None) -> None:
        """What the resolver does not see: an IP literal, or the target behind a proxy."""
        from mail.stdlib.netpolicy import resolve

        parts = parse_url(url)
        host = parts.host or ""
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            self.policy.check(host, [literal])
        elif proxy is not None:
            self.policy.check(host, await resolve(host, parts.port or 0))

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        """One attempt: POST `body`, read at most max_response_bytes of the answer."""
        from mail.stdlib.netpolicy import AddressRefused

        client = self._client()
        started = time.monotonic()

        def took() -> float:
            return round((time.monotonic() - started) * 1000.0, 2)

        try:
            async with asyncio.timeout(self.cfg.timeout):
                proxy = self._proxy_for(url)
                await self._precheck(url, proxy)
                async with client.post(
                    url, data=body, headers=headers, allow_redirects=False, proxy=proxy
                ) as r:
                    data = await _read_some(r.content, self.cfg.max_response_bytes)
                    return Answer(
                        status=r.status,
                        latency_ms=took(),
                        excerpt=data.decode("utf-8", errors="replace"),
                        retry_after=r.headers.get("Retry-After"),
                    )
        except AddressRefused as exc:
            return Answer(None, took(), error=str(exc), refused=True)
        except TimeoutError:
            return Answer(None, took(), error=f"no answer within {self.cfg.timeout:g} s")
        except ValueError as exc:  # a URL the client cannot send to (stored before it was checked)
            return Answer(None, took(), error=f"the URL cannot be sent to: {exc}", refused=True)
        except (self._aiohttp.ClientError, OSError) as exc:
            refused = _refusal(exc)
            if refused is not None:
                return Answer(None, took(), error=str(refused), refused=True)
            return Answer(None, took(), error=self._connection_error(exc))

    def _connection_error(self, exc: BaseException) -> str:
        """What went wrong, in words: aiohttp's own text of a connection that failed names
        its TLS setting (``ssl:default``) even for a plain ``http://`` URL."""
        if isinstance(exc, self._aiohttp.ClientConnectorError):
            cause: Any = getattr(exc, "certificate_error", None) or exc.os_error
            errno = getattr(cause, "errno", None)
            why = os.strerror(errno) if isinstance(errno, int) and errno > 0 else None
            why = why or getattr(cause, "strerror", None) or str(cause)
            tls = " (TLS)" if isinstance(exc, self._aiohttp.ClientSSLError) else ""
            return f"cannot connect to {exc.host}:{exc.port}{tls}: {why}"
        return f"{type(exc).__name__}: {exc}"


def _refusal(exc: BaseException) -> BaseException | None:
    """The guard's refusal behind an aiohttp error, if that is what it is."""
    from mail.stdlib.netpolicy import AddressRefused, exception_chain

    return next((seen for seen in exception_chain(exc) if isinstance(seen, AddressRefused)), None)


async def _read_some(content: Any, limit: int) -> bytes:
    """Up to `limit` bytes of the body; the rest is not read (the connection is dropped)."""
    data = bytearray()
    while len(data) < limit:
        chunk = await content.read(limit - len(data))
        if not chunk:
            break
        data.extend(chunk)
    return bytes(data)
