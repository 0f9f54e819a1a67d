"""``mail.server.app``: the application v1.3 kept in a module attribute, built on first use.

v1.3's server module created its FastAPI instance at import, so ``uvicorn mail.server:app``
served it and programs could read ``app.routes`` or add middleware. Here the package attribute
``mail.server.app`` is built by `served_app` the first time it is read: the server mail.toml
configures (``create_app()``), whose startup first does the same first-start work as
`mail server` (`server/first_start.py`: the registry folder, the local API keys, shown once,
and the SQLite database). Our own code builds applications with ``mail.server.create_app``
(``server/app_factory.py``).

A server that cannot start (a database another server holds, a swarm its swarms.json lacks,
...) says so in one line when it starts (its lifespan), not at import: reading
``mail.server.app`` never fails for want of a swarms.json, as in v1.3.
"""

from __future__ import annotations

from typing import Any


def served_app() -> Any:
    """The configured server's FastAPI application; its startup does the first-start work."""
    from mail.server.app_factory import config_from_env, create_app

    return create_app(config_from_env(), first_start=True)
