"""Swarms an agent discovered: known to one instance, never to the server's registry.

Discovery URLs are bare base URLs fetched through `PeerHttp` (the stdlib address guard);
no token is ever read from a listing or sent to a discovered swarm.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from mail.core.message import is_valid_swarm_name
from mail.net.router import peer_error_text
from mail.net.types import InterswarmError

if TYPE_CHECKING:
    from mail.core.message import MAILInterswarmMessage

logger = logging.getLogger("mail.interswarm")

MAX_URLS_PER_CALL = 8
MAX_SWARMS_PER_LIST = 100
MAX_DISCOVERED = 32
MAX_NAME_LENGTH = 100


class PeerHttpError(Exception):
    """A guarded request that failed or was refused; the text says why."""


class PeerHttp(Protocol):
    """Outbound HTTP for discovery (implemented over the stdlib address guard)."""

    async def get_json(self, url: str) -> Any: ...

    async def check_address(self, url: str) -> None: ...

    async def post_json(
        self, url: str, body: dict[str, Any], timeout: float
    ) -> tuple[int, str]: ...


@dataclass(frozen=True)
class DiscoveredSwarm:
    name: str
    base_url: str
    source: str  # the discovery URL that listed it


def discovery_base_url(url: Any) -> str:
    """`url` as `scheme://host[:port]`, or ValueError saying what is not allowed in it."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"{url!r} is not a URL")
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{text!r}: only http and https URLs are allowed")
    if not parts.hostname:
        raise ValueError(f"{text!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{text!r}: credentials in the URL are not allowed")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in text:
        raise ValueError(
            f"{text!r}: give the server's base URL (scheme://host[:port]) without a path, "
            "query or fragment; the list is read from its /swarms"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")


def _valid_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and len(name) <= MAX_NAME_LENGTH
        and is_valid_swarm_name(name)
        and "/" not in name
    )


class DiscoveredSwarms:
    """The swarms one instance's agents discovered (see the module docstring)."""

    def __init__(
        self, http: PeerHttp, local_swarm: str, server_knows: Callable[[str], bool]
    ) -> None:
        self.http = http
        self.local_swarm = local_swarm
        self.server_knows = server_knows
        self.entries: dict[str, DiscoveredSwarm] = {}

    def get(self, name: str) -> DiscoveredSwarm | None:
        """The discovered swarm `name`, unless the server itself knows that name."""
        found = self.entries.get(name)
        if found is None or self.server_knows(name):
            return None
        return found

    # ------------------------------------------------------------------ discovery
    async def discover(self, raw_urls: Any) -> str:
        """Read the lists at `raw_urls`; the tool result for the agent."""
        if not isinstance(raw_urls, list) or not raw_urls:
            return "ERROR: discovery_urls must be a non-empty list of base URLs"
        if len(raw_urls) > MAX_URLS_PER_CALL:
            return f"ERROR: at most {MAX_URLS_PER_CALL} discovery URLs per call"
        try:
            bases = list(dict.fromkeys(discovery_base_url(u) for u in raw_urls))
        except ValueError as exc:
            return f"ERROR: discovery refused, nothing was fetched: {exc}"
        found: list[str] = []
        notes: list[str] = []
        for base in bases:
            try:
                document = await self.http.get_json(f"{base}/swarms")
            except PeerHttpError as exc:
                notes.append(f"{base}: {exc}")
                continue
            items = document.get("swarms") if isinstance(document, dict) else document
            if not isinstance(items, list):
                notes.append(f"{base}: the answer holds no swarm list")
                continue
            for item in items[:MAX_SWARMS_PER_LIST]:
                if isinstance(item, dict):
                    outcome = await self._consider(base, item)
                    (found if outcome.startswith("+") else notes).append(outcome.lstrip("+"))
            if len(items) > MAX_SWARMS_PER_LIST:
                notes.append(f"{base}: only the first {MAX_SWARMS_PER_LIST} entries were read")
        if not found:
            return "ERROR: no swarm was discovered" + (f" ({'; '.join(notes)})" if notes else "")
        text = (
            "SUCCESS: discovered swarms (known to this task's instance only; reached without "
            "credentials): " + ", ".join(found)
        )
        return text + (f". Skipped: {'; '.join(notes)}" if notes else "")

    async def _consider(self, source: str, item: dict[str, Any]) -> str:
        """Add one listed swarm: `+name at url`, or a note saying why not."""
        name = item.get("swarm_name") or item.get("name")
        if not _valid_name(name):
            return f"an entry of {source} has no valid swarm name"
        assert isinstance(name, str)
        if name == self.local_swarm:
            return f"'{name}' is this swarm"
        if self.server_knows(name):
            return f"'{name}' is already registered on this server (that entry is used)"
        try:
            base_url = discovery_base_url(item.get("base_url"))
        except ValueError as exc:
            return f"'{name}': {exc}"
        try:
            await self.http.check_address(base_url)
        except PeerHttpError as exc:
            return f"'{name}': {exc}"
        if name not in self.entries and len(self.entries) >= MAX_DISCOVERED:
            return f"'{name}': this instance already knows {MAX_DISCOVERED} discovered swarms"
        self.entries[name] = DiscoveredSwarm(name, base_url, source)
        logger.info("discovered swarm '%s' at %s (listed by %s)", name, base_url, source)
        return f"+{name} at {base_url}"

    # ------------------------------------------------------------------ sending
    async def send(
        self,
        swarm: DiscoveredSwarm,
        envelope: MAILInterswarmMessage,
        direction: str,
        timeout: float,
    ) -> None:
        """POST an envelope to a discovered swarm, without credentials."""
        outgoing: dict[str, Any] = dict(envelope)
        outgoing["auth_token"] = ""
        url = f"{swarm.base_url}/interswarm/{direction}"
        try:
            status, text = await self.http.post_json(url, {"message": outgoing}, timeout)
        except PeerHttpError as exc:
            raise InterswarmError(
                f"discovered swarm '{swarm.name}' ({swarm.base_url}): {exc}",
                swarm_name=swarm.name,
            ) from exc
        if not 200 <= status < 300:
            said = peer_error_text(text)
            raise InterswarmError(
                f"discovered swarm '{swarm.name}' answered HTTP {status}"
                + (f": {said}" if said else "")
                + " (discovered swarms are reached without credentials; an admin can "
                "register it with a token through POST /swarms)",
                swarm_name=swarm.name,
                status=status,
            )
