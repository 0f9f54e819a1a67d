"""The address guard's policy without an HTTP client: which destinations outbound
connections may reach, name resolution, and the shared TLS context.
"""

from __future__ import annotations

import fnmatch
import functools
import ipaddress
import socket
import ssl
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio

from mail.config import StdlibNetConfig

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

__all__ = ["AddressPolicy", "AddressRefused", "exception_chain", "resolve", "shared_ssl_context"]


class AddressRefused(Exception):
    """A connection the guard will not open; the message says why and how to allow it."""


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during, innermost last (a cycle ends it): where
    a refusal or a connect error hides behind a client library's own error."""
    seen: BaseException | None = exc
    met: set[int] = set()
    while seen is not None and id(seen) not in met:
        met.add(id(seen))
        yield seen
        seen = seen.__cause__ or seen.__context__


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to its destination (mapped, 6to4, Teredo client,
    NAT64's well-known prefix, the deprecated IPv4-compatible form), or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _classify(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public destination (None when it is)."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            return _classify(inner)
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local (cloud metadata)"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "non-public"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """Which destinations may be reached (built from ``[stdlib.net]``)."""

    allow_all: bool = False
    host_patterns: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()
    # The setting a refusal tells the operator to extend (webhooks have their own).
    setting: str = "[stdlib.net] allowed_hosts"

    @classmethod
    def from_config(
        cls, cfg: StdlibNetConfig, setting: str = "[stdlib.net] allowed_hosts"
    ) -> AddressPolicy:
        patterns: list[str] = []
        networks: list[IPNetwork] = []
        for entry in cfg.allowed_hosts:
            text = entry.strip().lower().strip("[]")
            if not text:
                continue
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                patterns.append(text.rstrip("."))
        return cls(cfg.allow_private_addresses, tuple(patterns), tuple(networks), setting)

    def host_allowed(self, host: str) -> bool:
        name = host.lower().strip("[]").rstrip(".")
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.host_patterns)

    def address_allowed(self, ip: IPAddress) -> bool:
        plain = (_embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None) or ip
        return any(net.version == ip.version and ip in net for net in self.networks) or any(
            plain in net for net in self.networks
        )

    def check(self, host: str, addresses: Iterable[IPAddress]) -> list[IPAddress]:
        """The addresses of ``host`` that may be used; raises when none may."""
        addresses = list(addresses)
        if self.allow_all or self.host_allowed(host):
            return addresses
        allowed: list[IPAddress] = []
        refused: list[tuple[IPAddress, str]] = []
        for ip in addresses:
            reason = _classify(ip)
            if reason is None or self.address_allowed(ip):
                allowed.append(ip)
            else:
                refused.append((ip, reason))
        if refused:
            # One bad answer refuses the host: a name that mixes public and internal
            # addresses is a classic way to slip past a guard.
            ip, reason = refused[0]
            where = host if host.strip("[]") == str(ip) else f"{host} ({ip})"
            raise AddressRefused(
                f"refused to connect to {where}: {reason} addresses are blocked; "
                f"add the host to {self.setting} to allow it"
            )
        if not allowed:
            raise AddressRefused(f"could not resolve {host}")
        return allowed


async def resolve(host: str, port: int, core: Any = None) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal resolves to itself).

    A failed resolution raises ``core.ConnectError`` (``core`` is the httpcore module in use;
    httpcore itself by default, imported only then).
    """
    bare = host.strip("[]")
    try:
        return [ipaddress.ip_address(bare)]
    except ValueError:
        pass
    try:
        infos = await anyio.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        if core is None:
            import httpcore as core
        raise core.ConnectError(f"could not resolve {host}: {exc}") from exc
    seen: dict[str, IPAddress] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        text = str(sockaddr[0]).split("%", 1)[0]
        seen.setdefault(text, ipaddress.ip_address(text))
    return list(seen.values())


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context (system CA bundle) for every client of the process.

    Loading the CA bundle takes tens of milliseconds (far more on a busy machine), and each
    action call builds a fresh client, so the context is built once and shared.
    """
    import certifi

    # What httpx.create_ssl_context(trust_env=False) builds, without importing httpx.
    return ssl.create_default_context(cafile=certifi.where())
