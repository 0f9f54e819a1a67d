"""Reaching a Ray cluster: reachability and token probes, and a private cluster's folder."""

from __future__ import annotations

import os
import tempfile

from mail.cluster.settings import ClusterUnavailable, gcs_refuses

# How Ray words a refused or missing token (Ray >= 2.52 token authentication).
_AUTH_SIGNS = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError", "auth token")


def _short_temp_root() -> str | None:
    """Where a private cluster's folder goes: Ray's socket paths must stay short (Unix
    sockets allow ~107 bytes), so a long ``TMPDIR`` is passed over for ``/tmp``."""
    root = tempfile.gettempdir()
    return "/tmp" if len(root) > 40 and os.path.isdir("/tmp") else None


# Seconds a front end gives a named cluster's head to accept a connection before it gives up
# (Ray itself keeps retrying an unreachable head for minutes).
CONNECT_TIMEOUT = 10.0


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail at once, in one line, when a ``host:port`` (or ``ray://host:port``) head does not
    accept connections. ``auto`` is left to Ray (it fails fast when nothing is found)."""
    import socket
    from urllib.parse import urlsplit

    if address in ("auto", "local", ""):
        return
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # not a port: Ray gives its own error
        return
    if not host or not port:
        return
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ClusterUnavailable(
            f"cannot reach the Ray cluster at '{address}': {exc.strerror or exc} "
            "(is the head running? `ray start --head`; check the address and the firewall)"
        ) from None


def head_requires_token(address: str, timeout: float = 5.0) -> bool:
    """Whether the GCS at ``host:port`` refuses a call that carries no token (False when
    unknown: a ``ray://`` address, no answer, or a Ray without token authentication)."""
    return _refuses(address, (), timeout)


def head_refuses_our_token(address: str, timeout: float = 5.0) -> bool:
    """Whether the GCS at ``host:port`` refuses the token this process would present
    (Ray itself retries a refused token for minutes before it gives up)."""
    try:
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

        header = AuthenticationTokenLoader.instance().get_token_for_http_header(
            ignore_auth_mode=True
        )
    except Exception:  # noqa: BLE001 - a Ray without token authentication, or no token
        return False
    metadata = tuple((str(k).lower(), str(v)) for k, v in dict(header or {}).items())
    return bool(metadata) and _refuses(address, metadata, timeout)


def _refuses(address: str, metadata: tuple[tuple[str, str], ...], timeout: float) -> bool:
    """Whether one GetClusterId call carrying `metadata` is refused as unauthenticated."""
    return gcs_refuses(address, metadata, timeout) is True


def _token_auth_off() -> bool:
    """Whether this driver runs without Ray's token authentication (False when unknown)."""
    try:
        from ray._raylet import (  # type: ignore[attr-defined]
            AuthenticationMode,
            get_authentication_mode,
        )
    except ImportError:  # a Ray without token authentication (< 2.52)
        return False
    try:
        return bool(get_authentication_mode() != AuthenticationMode.TOKEN)
    except Exception:  # noqa: BLE001 - private API: never fail a start over a warning
        return False
