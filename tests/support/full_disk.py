"""A real small file system that a test can fill and free: a tmpfs mounted for the test.

Mounting needs root (or CAP_SYS_ADMIN); where that is not available the tests that use it
are skipped with the reason. Nothing here fakes a write error: SQLite and PostgreSQL see
``ENOSPC`` from the kernel exactly as on a full disk.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(mountpoint: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `mountpoint` for the duration of the block."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        # Lazy: a process that still holds a file there does not keep the mount alive.
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


class Filler:
    """Takes every free byte of a file system, and gives it back."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "filler.bin"

    def fill(self) -> int:
        """Write until the kernel says ENOSPC; returns the bytes taken."""
        written = 0
        chunk = b"\0" * 65536
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while len(chunk) >= 512:
                try:
                    written += os.write(fd, chunk)
                except OSError:  # ENOSPC: try smaller pieces down to the last block
                    chunk = chunk[: len(chunk) // 2]
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.path.unlink(missing_ok=True)
