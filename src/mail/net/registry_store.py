"""Registry persistence: token references, the JSON file shape, atomic writes, and the lock
and change checks of a file several processes share (cluster mode)."""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mail.net.types import SwarmEndpoint, SwarmEndpointCleaned

logger = logging.getLogger("mail.net.registry")

DEFAULT_TOKEN_PREFIX = "SWARM_AUTH_TOKEN"

_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_NOT_ENV_CHAR = re.compile(r"[^A-Z0-9_]")


# --------------------------------------------------------------------------- base URLs


def normalize_base_url(base_url: str) -> str:
    """``base_url`` without trailing slashes, or ValueError saying what is wrong with it."""
    url = (base_url or "").strip().rstrip("/")
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://, got '{base_url}'")
    if any(char.isspace() for char in url):
        raise ValueError(f"base_url must not contain whitespace, got '{base_url}'")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in url):
        raise ValueError(f"base_url must not contain control characters, got {base_url!r}")
    if "\\" in url:
        # Read as a host character by urlsplit, as "/" by WHATWG parsers (browsers, proxies).
        raise ValueError(f"base_url must not contain a backslash, got '{base_url}'")
    parts = urlsplit(url)
    if "?" in url:
        raise ValueError(f"base_url must not contain a query string ('?...'), got '{base_url}'")
    if "#" in url:
        raise ValueError(f"base_url must not contain a fragment ('#...'), got '{base_url}'")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"base_url must not contain credentials; give the token as auth_token instead "
            f"(got a URL with user info for host '{parts.hostname}')"
        )
    if not parts.hostname:
        raise ValueError(f"base_url has no host: '{base_url}'")
    try:
        parts.port  # noqa: B018 - the property validates the port
    except ValueError as exc:
        raise ValueError(f"base_url has an invalid port: '{base_url}'") from exc
    return url


# --------------------------------------------------------------------------- token refs


def token_env_var(swarm_name: str, prefix: str = DEFAULT_TOKEN_PREFIX) -> str:
    """Environment variable that holds the token for `swarm_name`."""
    return f"{prefix}_{_NOT_ENV_CHAR.sub('_', swarm_name.upper())}"


def make_env_ref(var_name: str) -> str:
    return "${" + var_name + "}"


def parse_env_ref(ref: str | None) -> str | None:
    """The variable name inside a `${VAR}` reference, or None if `ref` is not one."""
    if not ref:
        return None
    match = _ENV_REF.match(ref.strip())
    return match.group(1) if match else None


def is_env_ref(ref: str | None) -> bool:
    return parse_env_ref(ref) is not None


def resolve_token_ref(ref: str | None) -> str | None:
    """Turn an `auth_token_ref` into a token."""
    if not ref:
        return None
    var = parse_env_ref(ref)
    if var is None:
        return ref
    return os.environ.get(var) or None


# --------------------------------------------------------------------------- endpoints


def iso_or_none(moment: datetime.datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def parse_datetime(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed


def endpoint_to_json(endpoint: SwarmEndpoint) -> dict[str, Any]:
    """All endpoint fields, JSON-able (`last_seen` as ISO-8601 or null)."""
    data: dict[str, Any] = dict(endpoint)
    data["last_seen"] = iso_or_none(endpoint["last_seen"])
    data["keywords"] = list(endpoint["keywords"])
    return data


def endpoint_from_json(swarm_name: str, data: dict[str, Any]) -> SwarmEndpoint:
    """Rebuild an endpoint from its file form, tolerating missing optional fields."""
    raw = str(data.get("base_url") or "")
    if not raw.strip():
        raise ValueError(f"registry entry '{swarm_name}' has no base_url")
    try:
        base_url = normalize_base_url(raw)
    except ValueError as exc:
        raise ValueError(f"registry entry '{swarm_name}': {exc}") from exc
    keywords = data.get("keywords")
    metadata = data.get("metadata")
    latency = data.get("latency")
    return SwarmEndpoint(
        swarm_name=swarm_name,
        base_url=base_url,
        version=str(data.get("version") or ""),
        health_check_url=str(data.get("health_check_url") or f"{base_url}/health"),
        auth_token_ref=data.get("auth_token_ref") or None,
        last_seen=parse_datetime(data.get("last_seen")),
        is_active=bool(data.get("is_active", True)),
        latency=float(latency) if isinstance(latency, int | float) else None,
        swarm_description=str(data.get("swarm_description") or ""),
        keywords=[str(k) for k in keywords] if isinstance(keywords, list) else [],
        metadata=metadata if isinstance(metadata, dict) else None,
        public=bool(data.get("public", False)),
        # Anything in the file survived a restart, so it is persistent by definition.
        volatile=False,
        caller_id=str(data["caller_id"]) if data.get("caller_id") else None,
    )


def clean_endpoint(endpoint: SwarmEndpoint) -> SwarmEndpointCleaned:
    """The public view of an endpoint for `GET /swarms`."""
    return SwarmEndpointCleaned(
        swarm_name=endpoint["swarm_name"],
        base_url=endpoint["base_url"],
        version=endpoint["version"],
        last_seen=iso_or_none(endpoint["last_seen"]),
        is_active=endpoint["is_active"],
        latency=endpoint["latency"],
        swarm_description=endpoint["swarm_description"],
        keywords=list(endpoint["keywords"]),
        metadata=endpoint["metadata"],
    )


# --------------------------------------------------------------------------- file I/O


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` so that readers see either the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o600)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def read_registry_file(path: Path) -> dict[str, Any] | None:
    """The parsed registry file, or None when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"registry file {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"registry file {path} must hold a JSON object")
    return data


def entries_from_document(
    data: dict[str, Any], local_name: str, keep_volatile: bool
) -> tuple[dict[str, SwarmEndpoint], dict[str, str]]:
    """The remote endpoints of a registry file, and the raw tokens it held by swarm name."""
    entries: dict[str, SwarmEndpoint] = {}
    raw_tokens: dict[str, str] = {}
    endpoints = data.get("endpoints")
    for name, entry in (endpoints if isinstance(endpoints, dict) else {}).items():
        if name == local_name:
            continue
        if not isinstance(entry, dict):
            logger.warning("skipping malformed registry entry '%s'", name)
            continue
        try:
            endpoint = endpoint_from_json(name, entry)
        except ValueError as exc:
            logger.warning("skipping registry entry: %s", exc)
            continue
        if keep_volatile:
            endpoint["volatile"] = bool(entry.get("volatile", False))
        ref = endpoint["auth_token_ref"]
        if ref and not is_env_ref(ref):
            var = token_env_var(name)
            raw_tokens[name] = ref
            endpoint["auth_token_ref"] = make_env_ref(var)
            logger.warning(
                "registry file holds a raw token for swarm '%s'; it will be replaced by "
                "${%s} on the next save, export that variable",
                name,
                var,
            )
        entries[name] = endpoint
    return entries, raw_tokens


# --------------------------------------------------------------------------- shared file

try:  # POSIX; elsewhere a shared registry is written without the lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

FileSignature = tuple[int, int, int]


def file_signature(path: Path) -> FileSignature | None:
    """What changes whenever the file is replaced or rewritten (None: no file)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock that serialises changes to ``path`` across processes."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def take_file_entries(
    endpoints: dict[str, SwarmEndpoint], fresh: dict[str, SwarmEndpoint], local_name: str
) -> list[str]:
    """Make ``endpoints`` hold the file's remote entries ``fresh``; returns the names removed."""
    removed = [name for name in endpoints if name != local_name and name not in fresh]
    for name in removed:
        del endpoints[name]
    for name, endpoint in fresh.items():
        known = endpoints.get(name)
        if known is not None and known["base_url"] == endpoint["base_url"]:
            endpoint["is_active"] = known["is_active"]
            endpoint["latency"] = known["latency"]
            endpoint["last_seen"] = known["last_seen"]
        endpoints[name] = endpoint
    return removed
