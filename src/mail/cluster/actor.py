"""The body of an instance host's Ray actor, and what a front end passes it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from mail.cluster.host import ForwardedRequest, InstanceHost, UnaryResponse, caller_to_dict
from mail.cluster.settings import require_ray
from mail.server.auth import Caller
from mail.server.instances import instance_kind

logger = logging.getLogger("mail.cluster")

# Environment an instance host needs from its front end (the actor runs in a Ray worker).
# SWARM_AUTH_TOKEN_*: the registry's token references (interswarm calls run in the actors).
FORWARDED_ENV_PREFIXES = (
    "MAIL_",
    "LITELLM_",
    "OPENAI_",
    "ANTHROPIC_",
    "AZURE_",
    "GEMINI_",
    "SWARM_AUTH_TOKEN_",
)
FORWARDED_ENV_NAMES = ("DATABASE_URL", "PYTHONPATH", "AUTH_ENDPOINT", "TOKEN_INFO_ENDPOINT")
# Share of a CPU an instance reserves: instances wait on models and the network, not on CPU.
INSTANCE_CPUS = 0.01


def forwarded_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(FORWARDED_ENV_PREFIXES) or k in FORWARDED_ENV_NAMES
    }
    env.pop("MAIL_CLUSTER_BACKEND", None)
    return env


def _client_request(request: ForwardedRequest) -> ForwardedRequest:
    """A client's request never reaches the host's internal routes (only ``owned_*`` do)."""
    from mail.cluster.owned import OWNED_PREFIX

    if request.path.startswith(OWNED_PREFIX):
        raise ValueError(f"not a client route: {request.path}")
    return request


class InstanceActor:
    """The body of the Ray actor: an :class:`InstanceHost` plus idle reclaim."""

    def __init__(
        self,
        config_json: str,
        caller: dict[str, Any] | None,
        env: dict[str, str],
        cwd: str,
        template_json: str | None = None,
        profile: str = "",
    ) -> None:
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        os.environ.update(env)  # already set at worker start (runtime_env); kept for clarity
        from mail.config import ServerConfig

        self.idle_timeout = ServerConfig.model_validate_json(
            config_json
        ).settings.instance_idle_timeout
        self.host = InstanceHost(config_json, caller, env, template_json=template_json)
        # Async actor: __init__ runs on the actor's event loop, so the host starts (and a
        # restarted one resumes its tasks) without waiting for the first request. Without a
        # caller it is a warm host of the pool (``warm_pool``): ready, waiting to adopt one.
        if caller is None:
            self.host.prepare_soon()
        else:
            self.host.start_soon()
        self.host.on_lost = self._lost
        self._ending: asyncio.Task[None] | None = None
        self._ended = asyncio.Event()
        # A pooled host learns its instance's name when it adopts one; a named actor (no
        # pool) was created under it.
        self.name = (
            "" if caller is None else (require_ray().get_runtime_context().get_actor_name() or "")
        )
        self.profile = profile  # the warm pool's profile it was started for
        self._reaper = (
            asyncio.get_running_loop().create_task(self._reap()) if self.idle_timeout > 0 else None
        )

    async def ready(self) -> dict[str, Any]:
        await self.host.ready()
        return await self.describe()

    async def describe(self) -> dict[str, Any]:
        ray = require_ray()
        node_id = ray.get_runtime_context().get_node_id()
        return {**self.host.describe(), "node_id": node_id, "name": self.name}

    async def warm(self) -> dict[str, Any]:
        """A warm host: answers once its application and store are ready."""
        await asyncio.shield(self.host.prepare_soon())
        return await self.describe()

    async def adopt(
        self, name: str, caller: dict[str, Any], template_json: str | None
    ) -> dict[str, Any]:
        """Become the host of instance ``name`` (claim, restore, resume its tasks)."""
        self.name = name
        self.host.adopt(caller, template_json)
        return await self.ready()

    async def adoption(self) -> dict[str, Any]:
        """What a restarted directory needs to know of this host (warm when no ``name``)."""
        ray = require_ray()
        adopted = self.host.adopted
        return {
            "name": self.name if adopted else "",
            "caller": caller_to_dict(self.host.caller) if adopted else None,
            "template_json": self.host.template_json,
            "profile": self.profile,
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    async def watch(self) -> str:
        """Answers when this actor ends on purpose (idle, fenced); fails when it dies."""
        await self._ended.wait()
        return "ended"

    async def unary(self, caller: dict[str, Any], request: ForwardedRequest) -> UnaryResponse:
        return await self.host.unary(caller, _client_request(request))

    async def stream(
        self, caller: dict[str, Any], request: ForwardedRequest
    ) -> AsyncIterator[dict[str, Any]]:
        async for message in self.host.stream(caller, _client_request(request)):
            yield message

    async def loop_running(self) -> bool:
        return await self.host.loop_running()

    async def has_task(self, task_id: str) -> bool:
        return await self.host.has_task(task_id)

    async def owned_unary(self, request: ForwardedRequest) -> UnaryResponse:
        """An admin's request about this actor's own instance (see ``cluster.owned``)."""
        return await self.host.unary(self.host.owner(), self.host.owned(request))

    async def owned_stream(self, request: ForwardedRequest) -> AsyncIterator[dict[str, Any]]:
        async for message in self.host.stream(self.host.owner(), self.host.owned(request)):
            yield message

    async def _reap(self) -> None:
        interval = max(0.05, min(60.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                if self.host.idle_for() >= self.idle_timeout:
                    break
            except Exception:  # noqa: BLE001 - a failed check must not end the reaper
                logger.exception("checking whether instance %s is idle", self.host.caller.id)
        logger.info("instance %s idle: ending its actor", self.host.caller.id)
        await self._end()

    def _lost(self) -> None:
        if self._ending is None:
            self._ending = asyncio.get_running_loop().create_task(self._end())

    async def _end(self) -> None:
        """End this actor for good (reclaimed or fenced); the next request makes a new one."""
        self.host.closing = True  # from now on requests are refused (and sent to a new actor)
        while self.host.open_requests:
            await asyncio.sleep(0.01)
        self._ended.set()  # the warm pool's directory forgets it (no failover)
        with contextlib.suppress(Exception):
            await self.host.stop()
        ray = require_ray()
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


def is_instance_name(name: str) -> bool:
    """Instance actors are ``<swarm>/<kind>/<id>``; the deployment's own ones start with ``_``."""
    return not name.startswith("_") and name.count("/") >= 2


def actor_name(swarm: str, caller: Caller) -> str:
    return f"{swarm}/{instance_kind(caller.role)}/{caller.id}"
