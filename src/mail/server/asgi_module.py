"""``mail.server.app``: the application v1.3 kept in a module attribute, built on first use."""

from __future__ import annotations

from typing import Any


def served_app() -> Any:
    """The configured server's FastAPI application; its startup does the first-start work."""
    from mail.server.app_factory import config_from_env, create_app

    return create_app(config_from_env(), first_start=True)
