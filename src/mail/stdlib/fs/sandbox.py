"""The file root of the stdlib file actions, and confinement of agent-supplied paths to it.

Each caller's instance gets a folder of its own under the root (``<role>-<id>``), unless
``[stdlib.fs] shared = true`` makes every caller work in the root itself. Paths are walked with
:mod:`mail.utils.safe_files` (``openat``-style, links never followed).
"""

from __future__ import annotations

import os
from pathlib import Path

from mail.config import StdlibConfig, load_config
from mail.core.instance_context import current_instance, instance_folder_name
from mail.utils.safe_files import OutsideRoot, UnsafePath, entry_parts

DEFAULT_ROOT_DIR = "mail_files"


class PathRefused(Exception):
    """A path that leaves the file root (the message is shown to the agent)."""


def base_root(cfg: StdlibConfig) -> Path:
    """The configured root (unset: ``./mail_files/<swarm name>``), resolved, not created."""
    configured = cfg.fs.root.strip()
    if configured:
        root = Path(configured).expanduser()
    else:
        # `mail server` exports SWARM_NAME (it reflects --swarm-name, which the file does not).
        swarm = os.environ.get("SWARM_NAME") or load_config().server.swarm.name
        root = Path.cwd() / DEFAULT_ROOT_DIR / swarm
    return root.resolve()


def file_root(cfg: StdlibConfig, instance: tuple[str, str] | None = None) -> Path:
    """The folder the current caller's file actions work in, created on first use.

    `instance` is ``(caller_role, caller_id)``; by default the instance whose action is
    running (see :mod:`mail.core.instance_context`). Outside any instance (an action called
    directly from Python) it is the root itself.
    """
    root = base_root(cfg)
    who = instance if instance is not None else current_instance.get()
    if who is not None and not cfg.fs.shared:
        root = root / instance_folder_name(*who)
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def confine_parts(root: Path, raw: str) -> list[str]:
    """The components of `raw` below `root`, or PathRefused (the agent's error text)."""
    try:
        return entry_parts(root, raw)
    except OutsideRoot:
        raise PathRefused(f"{raw} is outside the file root ([stdlib.fs] root)") from None
    except UnsafePath as exc:
        raise PathRefused(str(exc)) from None
