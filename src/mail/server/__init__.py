"""The MAIL HTTP server (FastAPI): ``from mail.server import create_app``.

Submodules are imported lazily so that light users (``mail keys``) don't load FastAPI.
Run it with ``mail server`` or ``python -m mail.server``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from mail.server.app import create_app

        return create_app
    raise AttributeError(f"module 'mail.server' has no attribute {name!r}")
