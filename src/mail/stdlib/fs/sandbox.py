"""The file root of the stdlib file actions, and confinement of agent-supplied paths to it.

Each caller's instance gets a folder of its own under the root (``<role>-<id>``), unless
``[stdlib.fs] shared = true`` makes every caller work in the root itself. Paths are walked with
:mod:`mail.utils.safe_files` (``openat``-style, links never followed).
"""

from __future__ import annotations

from pathlib import Path

# The root's location is the core's (the team tools' files share it): re-exported here.
from mail.core.file_root import DEFAULT_ROOT_DIR, base_root, file_root  # noqa: F401
from mail.utils.safe_files import OutsideRoot, UnsafePath, entry_parts


class PathRefused(Exception):
    """A path that leaves the file root (the message is shown to the agent)."""


def confine_parts(root: Path, raw: str) -> list[str]:
    """The components of `raw` below `root`, or PathRefused (the agent's error text)."""
    try:
        return entry_parts(root, raw)
    except OutsideRoot:
        raise PathRefused(f"{raw} is outside the file root ([stdlib.fs] root)") from None
    except UnsafePath as exc:
        raise PathRefused(str(exc)) from None
