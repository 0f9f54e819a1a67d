"""Callables an upper layer installs for a lower one to call: the one way up.

Imports point down (docs/architecture.md). Where a lower layer must reach an upper one, it
calls a slot defined here and the upper layer fills it; nothing below imports what is above.

- server starter: how ``MAILSwarmTemplate.start_server`` (api/) serves a template over HTTP
  (server/, which builds on api/). ``mail.launch`` installs it when the ``mail`` package is
  imported, so it is always there for a template.
"""

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
