"""Where callers' instances live: in this process, or behind an instance backend."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastapi import FastAPI

    from mail.config import ServerConfig
    from mail.server.auth import Caller
    from mail.store import InstanceKey

# [server.cluster] backend -> "module:function" that installs it on an application:
# ``function(app, config)`` adds its routes (ahead of the local ones it shadows), sets
# ``app.state.cluster_backend`` and returns the backend.
CLUSTER_BACKENDS: dict[str, str] = {
    "ray": "mail.cluster.frontend:install_backend",
}


@dataclass
class ForwardedRequest:
    """An HTTP request as the front end received it (already authenticated, body bounded)."""

    method: str
    path: str
    query: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    client: tuple[str, int] | None = None


@dataclass
class UnaryResponse:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class InstanceBackend(Protocol):
    """Runs a caller's requests in the caller's instance, wherever that lives."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def unary(
        self, swarm: str, caller: Caller, request: ForwardedRequest
    ) -> UnaryResponse: ...

    def stream(
        self, swarm: str, caller: Caller, request: ForwardedRequest
    ) -> AsyncIterator[dict[str, Any]]: ...

    async def unary_at(
        self, swarm: str, kind: str, ident: str, caller: Caller, request: ForwardedRequest
    ) -> UnaryResponse | None: ...

    def unavailable(self, exc: BaseException) -> bool: ...

    async def continue_tasks(self, key: InstanceKey) -> bool:
        """Make the instance at ``key`` run where it lives, so its running tasks continue
        (a server's start-up resume); True once it runs."""
        ...


def install_cluster_backend(app: FastAPI, config: ServerConfig) -> InstanceBackend | None:
    """Install the backend ``[server.cluster]`` names; None for local instances."""
    name = config.cluster.backend
    if name == "none":
        return None
    target = CLUSTER_BACKENDS.get(name)
    if target is None:
        raise ValueError(
            f"unknown [server.cluster] backend {name!r}: one of none, {', '.join(CLUSTER_BACKENDS)}"
        )
    module, _, function = target.partition(":")
    backend: InstanceBackend = getattr(importlib.import_module(module), function)(app, config)
    return backend


def cluster_backend(app: Any) -> InstanceBackend | None:
    """The backend installed on ``app`` (None: instances are local)."""
    return getattr(app.state, "cluster_backend", None)
