"""Where an instance's files live: the stdlib file actions' root and the team tools' default."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mail.config import StdlibConfig, load_config
from mail.core.instance_context import current_instance, instance_folder_name

DEFAULT_ROOT_DIR = "mail_files"


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


def remove_task_files(files: Mapping[str, Any]) -> int:
    """Remove the files of removed tasks (`MAILTask.files`: absolute path -> [size,
    mtime_ns]); returns how many went. A file is removed only while it is still the regular
    file the task wrote (same size and modification time): one another task, a person or a
    later write changed since is left alone, as is a link put in its place."""
    removed = 0
    for path, kept in files.items():
        try:
            found = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(found.st_mode) and [found.st_size, found.st_mtime_ns] == list(kept):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
    return removed
