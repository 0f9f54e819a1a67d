"""Instance hosts as named Ray actors, and the front end's client of them.

One detached actor per instance, named ``<swarm>/<kind>/<id>`` in the deployment's namespace.
Front ends find it with ``get_if_exists`` (Ray's name registry makes creation atomic, so two
front ends never create two instances for one caller). ``max_restarts=-1``: when the node of an
actor dies, Ray starts it again on another node, where the host restores the instance from
PostgreSQL and continues its running tasks. Calls are never retried by Ray
(``max_task_retries=0``): a forwarded POST must not run twice; the front end decides.

An idle instance (no request, no stream, no running task for ``instance_idle_timeout``) ends
its actor for good; the next request creates a fresh one, which restores from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from mail.cluster.host import (
    ForwardedRequest,
    InstanceClosing,
    InstanceHost,
    UnaryResponse,
    caller_to_dict,
)
from mail.cluster.settings import ClusterUnavailable, require_ray
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
# A dead (reclaimed) actor's name is released asynchronously; retries of a lookup race it.
_LOOKUP_ATTEMPTS = 20
# Seconds a front end keeps resending a call that could not reach an instance (its node died
# and Ray is restarting it elsewhere, or it was just reclaimed) before answering 503.
RESTART_WINDOW = 30.0
_IDEMPOTENT = frozenset({"GET", "HEAD"})
# How Ray words an error for a call that never reached the actor (connection refused).
_UNDELIVERED_SIGNS = ("failed to connect", "Connection refused", "The actor is restarting")


def _short_temp_root() -> str | None:
    """Where a private cluster's folder goes: Ray's socket paths must stay short (Unix
    sockets allow ~107 bytes), so a long ``TMPDIR`` is passed over for ``/tmp``."""
    root = tempfile.gettempdir()
    return "/tmp" if len(root) > 40 and os.path.isdir("/tmp") else None


# Seconds a front end gives a named cluster's head to accept a connection before it gives up
# (Ray itself keeps retrying an unreachable head for minutes).
CONNECT_TIMEOUT = 10.0


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail at once, in one line, when a ``host:port`` (or ``ray://host:port``) head does not
    accept connections. ``auto`` is left to Ray (it fails fast when nothing is found)."""
    import socket
    from urllib.parse import urlsplit

    if address in ("auto", "local", ""):
        return
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # not a port: Ray gives its own error
        return
    if not host or not port:
        return
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ClusterUnavailable(
            f"cannot reach the Ray cluster at '{address}': {exc.strerror or exc} "
            "(is the head running? `ray start --head`; check the address and the firewall)"
        ) from None


def _token_auth_off() -> bool:
    """Whether this driver runs without Ray's token authentication (False when unknown)."""
    try:
        from ray._raylet import (  # type: ignore[attr-defined]
            AuthenticationMode,
            get_authentication_mode,
        )
    except ImportError:  # a Ray without token authentication (< 2.52)
        return False
    try:
        return bool(get_authentication_mode() != AuthenticationMode.TOKEN)
    except Exception:  # noqa: BLE001 - private API: never fail a start over a warning
        return False


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
        caller: dict[str, Any],
        env: dict[str, str],
        cwd: str,
        template_json: str | None = None,
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
        # restarted one resumes its tasks) without waiting for the first request.
        self.host.start_soon()
        self.host.on_lost = self._lost
        self._ending: asyncio.Task[None] | None = None
        self._reaper = (
            asyncio.get_running_loop().create_task(self._reap()) if self.idle_timeout > 0 else None
        )

    async def ready(self) -> dict[str, Any]:
        await self.host.ready()
        return await self.describe()

    async def describe(self) -> dict[str, Any]:
        ray = require_ray()
        return {**self.host.describe(), "node_id": ray.get_runtime_context().get_node_id()}

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
        with contextlib.suppress(Exception):
            await self.host.stop()
        ray = require_ray()
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


def is_instance_name(name: str) -> bool:
    """Instance actors are ``<swarm>/<kind>/<id>``; the deployment's own ones start with ``_``."""
    return not name.startswith("_") and name.count("/") >= 2


def actor_name(swarm: str, caller: Caller) -> str:
    return f"{swarm}/{instance_kind(caller.role)}/{caller.id}"


class RayInstances:
    """The front end's view of the cluster: finds or creates instance actors and calls them."""

    def __init__(self, config: Any, *, config_json: str | None = None) -> None:
        self.ray = require_ray()
        self.config = config
        self.namespace = config.cluster.namespace
        self.address = config.cluster.address
        self.config_json = config_json or config.model_dump_json(by_alias=False)
        self._actor_class: Any = None
        self._handles: dict[str, Any] = {}
        self._connected_here = False
        self._temp_dir: str | None = None
        # The swarm a POST /swarms/load made current (deployment.SharedState): new instance
        # actors are built from it instead of the configured swarms.json.
        self.template_json: str | None = None
        # Awaited before this front end first reaches an actor (deployment.SharedState).
        self.before_create: Any = None
        self.host = str(getattr(config, "host", "127.0.0.1"))
        self.env = forwarded_env()

    # -- connection ----------------------------------------------------------------------------

    def connect(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            try:
                if self.address == "local":
                    self._start_private_cluster()
                else:
                    check_reachable(self.address)
                    ray.init(
                        address=self.address,
                        namespace=self.namespace,
                        log_to_driver=False,
                        configure_logging=False,
                    )
            except ConnectionError as exc:
                raise ClusterUnavailable(
                    f"cannot reach the Ray cluster at '{self.address}': {exc} "
                    "(start one with `ray start --head`, or set [server.cluster] address)"
                ) from exc
            self._connected_here = True
            if self.address != "local" and _token_auth_off():
                logger.warning(
                    "Ray token authentication is off for the cluster at '%s': whoever reaches "
                    "its ports runs code with this server's environment. Set RAY_AUTH_MODE=token "
                    "and one token on every head, worker and front end (docs/security.md)",
                    self.address,
                )
        self._actor_class = ray.remote(InstanceActor)

    def _start_private_cluster(self) -> None:
        """``address = "local"``: a single-node cluster of this process and for it alone.

        ``address="local"`` makes Ray start a new cluster even when another one runs on the
        machine (``None`` would join the latest one, or ``RAY_ADDRESS``'s); its own temporary
        folder keeps it out of ``/tmp/ray`` (where ``ray status`` and ``ray.init()`` of other
        programs look); Ray picks free ports; token authentication is on with a token of its
        own (``prepare_ray_environment``); with a loopback ``host`` the node's address, and so
        every server of the cluster, is loopback. It ends with this process (``close``, or
        Ray's reaper process when this one is killed).
        """
        from mail.cluster.settings import is_loopback

        self._temp_dir = tempfile.mkdtemp(prefix="mail-ray-", dir=_short_temp_root())
        options: dict[str, Any] = {}
        if is_loopback(self.host):
            options["_node_ip_address"] = "127.0.0.1"
        self.ray.init(
            address="local",
            namespace=self.namespace,
            log_to_driver=False,
            configure_logging=False,
            include_dashboard=False,
            _temp_dir=self._temp_dir,
            **options,
        )

    def close(self) -> None:
        """Forget the handles; the actors (instances) live on for the other front ends.

        A private (``local``) cluster ends here, with its actors and its temporary folder.
        """
        self._handles.clear()
        if self._connected_here and self.ray.is_initialized():
            self.ray.shutdown()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    # -- actors --------------------------------------------------------------------------------

    async def actor(self, swarm: str, caller: Caller) -> Any:
        name = actor_name(swarm, caller)
        handle = self._handles.get(name)
        if handle is None:
            if self.before_create is not None:
                await self.before_create()
            handle = await asyncio.to_thread(self._get_or_create, name, caller)
            self._handles[name] = handle
        return handle

    def _get_or_create(self, name: str, caller: Caller) -> Any:
        last: Exception | None = None
        for _ in range(_LOOKUP_ATTEMPTS):
            try:
                return self._actor_class.options(
                    name=name,
                    get_if_exists=True,
                    lifetime="detached",
                    namespace=self.namespace,
                    max_restarts=-1,
                    max_task_retries=0,
                    num_cpus=INSTANCE_CPUS,
                    # Set when the worker process starts (PYTHONPATH must be, for factories).
                    runtime_env={"env_vars": self.env},
                ).remote(
                    self.config_json,
                    caller_to_dict(caller),
                    self.env,
                    os.getcwd(),
                    self.template_json,
                )
            except ValueError as exc:  # the name of a reclaimed actor is still being released
                last = exc
                import time

                time.sleep(0.05)
        raise ClusterUnavailable(f"cannot create instance actor {name}: {last}")

    def forget(self, swarm: str, caller: Caller) -> None:
        self._handles.pop(actor_name(swarm, caller), None)

    def list_instances(self) -> list[str]:
        names = self.ray.util.list_named_actors(all_namespaces=True)
        return sorted(
            n["name"]
            for n in names
            if isinstance(n, dict)
            and n.get("namespace") == self.namespace
            and is_instance_name(n["name"])
        )

    # -- calls ---------------------------------------------------------------------------------

    def unavailable(self, exc: BaseException) -> bool:
        """The error means the instance's actor is gone or restarting (answer 503)."""
        return isinstance(exc, self.ray.exceptions.RayActorError)

    def _retryable(self, exc: BaseException, idempotent: bool) -> bool:
        """Whether sending the call again is safe: it never ran, or running twice is harmless.

        A call never ran when the actor had ended for good (reclaimed), was closing, or was
        unreachable (its node is gone and the connection was refused). A call that was in
        flight when the node died may or may not have run: only idempotent ones are resent.
        """
        errors = self.ray.exceptions
        if isinstance(exc, errors.ActorUnavailableError):
            text = str(exc)
            return idempotent or any(sign in text for sign in _UNDELIVERED_SIGNS)
        if isinstance(exc, errors.ActorDiedError):
            return True
        return isinstance(exc, errors.RayTaskError) and isinstance(
            getattr(exc, "cause", None), InstanceClosing
        )

    async def _retry_pause(self, attempt: int, deadline: float) -> bool:
        """Wait before the next attempt; False once the restart window is over."""
        loop = asyncio.get_running_loop()
        pause = min(0.5, 0.02 * (2**attempt))
        if loop.time() + pause > deadline:
            return False
        await asyncio.sleep(pause)
        return True

    async def unary(self, swarm: str, caller: Caller, request: ForwardedRequest) -> UnaryResponse:
        name = actor_name(swarm, caller)
        reply = await self._unary(name, caller, request, lambda: self.actor(swarm, caller))
        assert reply is not None  # the caller's own actor is created when missing
        return reply

    async def unary_at(
        self, swarm: str, kind: str, ident: str, caller: Caller, request: ForwardedRequest
    ) -> UnaryResponse | None:
        """Run ``caller``'s request in the existing instance ``<swarm>/<kind>/<ident>``.

        For interswarm deliveries to another caller's instance (see
        ``forwarding.interswarm_recipient``); None when that instance has no actor (it is
        never created here: the front end does not hold its owner's credentials).
        """
        name = f"{swarm}/{kind}/{ident}"
        return await self._unary(name, caller, request, lambda: self.existing(name))

    async def existing(self, name: str) -> Any | None:
        handle = self._handles.get(name)
        if handle is None:
            try:
                handle = await asyncio.to_thread(self.ray.get_actor, name, self.namespace)
            except ValueError:  # no such actor (never made, or reclaimed)
                return None
            self._handles[name] = handle
        return handle

    async def _unary(
        self, name: str, caller: Caller, request: ForwardedRequest, locate: Any
    ) -> UnaryResponse | None:
        deadline = asyncio.get_running_loop().time() + RESTART_WINDOW
        idempotent = request.method in _IDEMPOTENT
        attempt = 0
        while True:
            handle = await locate()
            if handle is None:
                return None
            try:
                result: UnaryResponse = await handle.unary.remote(caller_to_dict(caller), request)
                return result
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as exc:
                self._handles.pop(name, None)
                if not self._retryable(exc, idempotent) or not await self._retry_pause(
                    attempt, deadline
                ):
                    raise
                attempt += 1

    async def stream(
        self, swarm: str, caller: Caller, request: ForwardedRequest
    ) -> AsyncIterator[dict[str, Any]]:
        deadline = asyncio.get_running_loop().time() + RESTART_WINDOW
        idempotent = request.method in _IDEMPOTENT
        attempt = 0
        while True:
            handle = await self.actor(swarm, caller)
            refs = handle.stream.remote(caller_to_dict(caller), request)
            started = finished = False
            try:
                async for ref in refs:
                    message = await ref
                    started = True
                    yield message
                finished = True
                return
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as exc:
                self.forget(swarm, caller)
                if (
                    started
                    or not self._retryable(exc, idempotent)
                    or not await self._retry_pause(attempt, deadline)
                ):
                    raise
                attempt += 1
            finally:
                if not finished:  # the client went away: stop the host's request too
                    with contextlib.suppress(Exception):
                        self.ray.cancel(refs)
