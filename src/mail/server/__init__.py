"""The MAIL HTTP server (FastAPI): ``from mail.server import create_app``."""

from __future__ import annotations

from typing import Any

__all__ = ["app", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from mail.server.app_factory import create_app

        return create_app
    if name == "app":
        from mail.server.app_factory import config_from_env, create_app

        # The configured server's application; its startup does the first-start work.
        application = create_app(config_from_env(), first_start=True)
        globals()["app"] = application
        return application
    raise AttributeError(f"module 'mail.server' has no attribute {name!r}")
