"""v1.3's ``mail.url_scheme``: ``parse_swarm_url`` over `mail.swarm_url`."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from mail.swarm_url import parse_swarm_link


@dataclass
class SwarmURL:
    """A parsed swarm:// link."""

    action: str  # "connect" or "invite"
    server: str | None = None
    token: str | None = None


def parse_swarm_url(url: str) -> SwarmURL | None:
    """The parts of a swarm:// link, or None when `url` is not a valid one."""
    try:
        link = parse_swarm_link(url)
    except ValueError:
        return None
    query = parse_qs(urlsplit(url.strip()).query)
    server = query.get("server", [None])[0]
    return SwarmURL(action=link.action, server=server, token=link.token)


__all__ = ["SwarmURL", "parse_swarm_url"]
