"""Callables an upper layer installs for a lower one to call: the one way up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ServerStarter = Callable[..., None]

_server_starter: ServerStarter | None = None


def install_server_starter(starter: ServerStarter) -> None:
    global _server_starter
    _server_starter = starter


def server_starter() -> ServerStarter:
    if _server_starter is None:  # only when someone cleared it: `import mail` installs it
        raise RuntimeError("no server starter installed: import mail.launch first")
    return _server_starter


def start_server(template: Any, **options: Any) -> None:
    server_starter()(template, **options)
