"""Switching a server into a cluster front end (``[server.cluster] backend = "ray"``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from mail.cluster.forwarding import install_cluster


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve()) if path else path


def host_config_json(config: Any) -> str:
    """The configuration instance hosts are built with: this one, with absolute paths."""
    swarm = config.swarm.model_copy(
        update={
            "source": _absolute(config.swarm.source),
            "registry_file": _absolute(config.swarm.registry_file),
        }
    )
    auth = config.auth.model_copy(update={"keys_file": str(config.keys_file_path().resolve())})
    team = config.team_tools.model_copy(
        update={
            "files_root": _absolute(config.team_tools.files_root),
        }
    )
    data = config.model_copy(update={"swarm": swarm, "auth": auth, "team_tools": team})
    return str(data.model_dump_json(by_alias=False))


class RayFrontEnd:
    """The backend of a front end: connects to Ray at start-up, forwards to instance actors."""

    def __init__(self, config: Any) -> None:
        from mail.cluster.deployment import SharedState
        from mail.cluster.ray_backend import RayInstances

        self.instances = RayInstances(config, config_json=host_config_json(config))
        self.shared = SharedState(self.instances)
        self._pool_start: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await asyncio.to_thread(self.instances.connect)
        if self.instances.pool is not None:
            # In the background: making the directory and the first warm hosts starts Ray
            # worker processes (seconds each, a minute on a loaded machine); a request that
            # comes first gets a host started for it, as without a pool.
            self._pool_start = asyncio.get_running_loop().create_task(self.instances.pool.start())
        await self.shared.warm()

    async def close(self) -> None:
        if self._pool_start is not None and not self._pool_start.done():
            self._pool_start.cancel()
        await asyncio.to_thread(self.instances.close)

    def unary(self, *args: Any) -> Any:
        return self.instances.unary(*args)

    def stream(self, *args: Any) -> Any:
        return self.instances.stream(*args)

    def unary_at(self, *args: Any) -> Any:
        return self.instances.unary_at(*args)

    def unavailable(self, exc: BaseException) -> bool:
        return self.instances.unavailable(exc)

    def continue_tasks(self, key: Any) -> Any:
        return self.instances.continue_tasks(key)


def install_backend(app: FastAPI, config: Any) -> RayFrontEnd:
    """``[server.cluster] backend = "ray"`` (see ``mail.server.backends.CLUSTER_BACKENDS``)."""
    from mail.cluster.settings import prepare_ray_environment, require_ray

    prepare_ray_environment(config.cluster.address, config.host)  # before Ray is imported
    require_ray()  # fail at creation with the install hint, not at the first request
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Each instance actor opens its own pool (the variables reach the actors with the rest of
    # MAIL_*): keep them small so the database sees a few connections per live instance.
    os.environ.setdefault("MAIL_DB_POOL_MIN", "1")
    os.environ.setdefault("MAIL_DB_POOL_MAX", "4")
    backend = RayFrontEnd(config)
    app.state.cluster_shared = backend.shared
    backend.shared.app = app
    install_cluster(app, backend)
    return backend
