"""Serving a swarm template from Python: the layer above api/ and server/."""

from __future__ import annotations

from typing import Any

from mail import hooks


def start_server(template: Any, port: int = 8000, host: str = "0.0.0.0", **options: Any) -> None:
    """Serve ``template`` over HTTP (blocks); see ``mail.server.app_factory.run_server_with_template``."""
    from mail.server.app_factory import run_server_with_template

    run_server_with_template(template, port=port, host=host, **options)


def install() -> None:
    hooks.install_server_starter(start_server)


__all__ = ["install", "start_server"]
