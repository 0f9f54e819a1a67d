"""A registry file shared by several processes (cluster mode: front ends and instance hosts)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from mail.net.types import SwarmEndpoint

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
