"""`swarm://` links: a shareable way to hand someone a MAIL server and, optionally, a key."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

SCHEME = "swarm"
ACTIONS = ("connect", "invite")


@dataclass(frozen=True)
class SwarmLink:
    action: str
    base_url: str
    token: str | None


def is_swarm_url(value: str) -> bool:
    return value.strip().lower().startswith(f"{SCHEME}:")


def parse_swarm_link(url: str) -> SwarmLink:
    """Parse a swarm:// URL; every malformed input raises ValueError saying what is wrong."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() != SCHEME:
        raise ValueError(f"not a swarm:// URL: {url!r}")
    if not text.lower().startswith(f"{SCHEME}://"):
        raise ValueError(f"malformed swarm URL {url!r}: expected swarm://connect?server=HOST")
    # urlsplit puts the action in netloc for "swarm://connect?..." and in path for odd forms.
    action = (parts.netloc or parts.path.strip("/")).lower()
    if parts.netloc and parts.path.strip("/"):
        raise ValueError(f"malformed swarm URL {url!r}: unexpected path {parts.path!r}")
    if action not in ACTIONS:
        shown = action or "(none)"
        raise ValueError(
            f"unsupported swarm:// action {shown!r} in {url!r}; expected one of: "
            + ", ".join(ACTIONS)
        )
    try:
        params = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    except ValueError as exc:  # pragma: no cover - parse_qs is lenient unless strict
        raise ValueError(f"malformed query in swarm URL {url!r}: {exc}") from exc
    server = _single(params, "server", url)
    if server is None:
        raise ValueError(
            f"swarm URL {url!r} has no server parameter (swarm://{action}?server=HOST)"
        )
    token = _single(params, "token", url)
    return SwarmLink(action=action, base_url=_server_to_base_url(server, url), token=token or None)


def parse_swarm_url(url: str) -> tuple[str, str | None]:
    """`swarm://connect?server=H&token=T` → `("https://H", "T")`; the token may be None."""
    link = parse_swarm_link(url)
    return link.base_url, link.token


def resolve_target(url: str, api_key: str | None = None) -> tuple[str, str | None]:
    """What a command should contact: a plain URL passes through; a swarm:// URL is expanded,
    and its token is used unless an API key was given explicitly."""
    if is_swarm_url(url):
        base_url, token = parse_swarm_url(url)
        return base_url, api_key if api_key else token
    return check_http_url(url), api_key


def check_http_url(url: str) -> str:
    """``url`` without trailing slashes, or ValueError unless it is an http(s) URL with a host."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        if "://" not in text:
            raise ValueError(
                f"'{url}' is not a server URL: it needs a scheme, e.g. http://{text or 'localhost:8000'}"
            )
        raise ValueError(
            f"'{url}' is not a server URL: use http:// or https:// (or a swarm:// link)"
        )
    return text


def _single(params: dict[str, list[str]], name: str, url: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(set(values)) > 1:
        raise ValueError(f"swarm URL {url!r} gives {name} more than once")
    return values[0].strip()


def _server_to_base_url(server: str, url: str) -> str:
    if not server:
        raise ValueError(f"swarm URL {url!r} has an empty server parameter")
    if any(char.isspace() for char in server):
        raise ValueError(f"server {server!r} in {url!r} contains whitespace")
    lowered = server.lower()
    if "://" in server and not lowered.startswith(("http://", "https://")):
        scheme = server.split("://", 1)[0]
        raise ValueError(f"server {server!r} in {url!r} uses {scheme!r}; only http and https work")
    candidate = server if lowered.startswith(("http://", "https://")) else f"https://{server}"
    parts = urlsplit(candidate)
    if not parts.hostname:
        raise ValueError(f"server {server!r} in {url!r} has an empty host")
    if parts.username or parts.password:
        raise ValueError(f"server {server!r} in {url!r} must not contain credentials; use token=")
    if parts.query or parts.fragment:
        raise ValueError(f"server {server!r} in {url!r} must not contain a query or fragment")
    try:
        parts.port  # noqa: B018 - property access validates the port
    except ValueError as exc:
        raise ValueError(f"server {server!r} in {url!r} has an invalid port") from exc
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
