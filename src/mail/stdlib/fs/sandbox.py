"""Confinement of agent-supplied paths to the configured file root."""

from __future__ import annotations

import os
from pathlib import Path

from mail.config import StdlibConfig, load_config

DEFAULT_ROOT_DIR = "mail_files"


class PathRefused(Exception):
    """A path that leaves the file root (the message is shown to the agent)."""


def file_root(cfg: StdlibConfig) -> Path:
    """The resolved root folder, created on first use.

    Unset, it is ``./mail_files/<swarm name>`` under the server's working directory, so each
    server (and swarm) gets a folder of its own instead of the whole disk.
    """
    configured = cfg.fs.root.strip()
    if configured:
        root = Path(configured).expanduser()
    else:
        # `mail server` exports SWARM_NAME (it reflects --swarm-name, which the file does not).
        swarm = os.environ.get("SWARM_NAME") or load_config().server.swarm.name
        root = Path.cwd() / DEFAULT_ROOT_DIR / swarm
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def confine(root: Path, raw: str) -> Path:
    """``raw`` resolved (symlinks followed) inside ``root``; relative paths start at the root."""
    if "\x00" in raw:
        raise PathRefused(f"{raw!r} is not a valid path")
    resolved = (root / Path(raw).expanduser()).resolve()
    if not _inside(resolved, root):
        raise PathRefused(f"{raw} is outside the file root ([stdlib.fs] root)")
    return resolved


def confine_entry(root: Path, raw: str) -> Path:
    """Like :func:`confine`, but a final symlink is kept as the link itself.

    Used for deletion: removing a link that lives inside the root never touches its target.
    """
    if "\x00" in raw:
        raise PathRefused(f"{raw!r} is not a valid path")
    lexical = root / Path(raw).expanduser()
    if lexical.name in ("", ".", ".."):
        return confine(root, raw)
    parent = lexical.parent.resolve()
    if not _inside(parent, root):
        raise PathRefused(f"{raw} is outside the file root ([stdlib.fs] root)")
    entry = parent / lexical.name
    if not entry.is_symlink():
        return confine(root, raw)
    return entry
