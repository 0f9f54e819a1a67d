"""Instance hosts as named Ray actors, and the front end's client of them.

Ray restarts an actor whose node died (``max_restarts=-1``) but never retries a call
(``max_task_retries=0``): a forwarded POST must not run twice; the front end decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

from mail.cluster.actor import (
    INSTANCE_CPUS,
    InstanceActor,
    actor_name,
    forwarded_env,
    is_instance_name,
)
from mail.cluster.host import (
    ForwardedRequest,
    InstanceClosing,
    InstanceStartFailed,
    UnaryResponse,
    caller_to_dict,
)
from mail.cluster.settings import ClusterUnavailable, gcs_refuses, require_ray
from mail.server.auth import Caller
from mail.store.base import StoreUnavailableError

# How Ray words a refused or missing token (Ray >= 2.52 token authentication).
_AUTH_SIGNS = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError", "auth token")

# Seconds a front end's start-up resume waits for one caller's host to be ready.
RESUME_READY = 120.0


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


def head_requires_token(address: str, timeout: float = 5.0) -> bool:
    """Whether the GCS at ``host:port`` refuses a call that carries no token (False when
    unknown: a ``ray://`` address, no answer, or a Ray without token authentication)."""
    return gcs_refuses(address, (), timeout) is True


def head_refuses_our_token(address: str, timeout: float = 5.0) -> bool:
    """Whether the GCS at ``host:port`` refuses the token this process would present
    (Ray itself retries a refused token for minutes before it gives up)."""
    try:
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

        header = AuthenticationTokenLoader.instance().get_token_for_http_header(
            ignore_auth_mode=True
        )
    except Exception:  # noqa: BLE001 - a Ray without token authentication, or no token
        return False
    metadata = tuple((str(k).lower(), str(v)) for k, v in dict(header or {}).items())
    return bool(metadata) and gcs_refuses(address, metadata, timeout) is True


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


logger = logging.getLogger("mail.cluster")

# A dead (reclaimed) actor's name is released asynchronously; retries of a lookup race it.
_LOOKUP_ATTEMPTS = 20
# Seconds a front end keeps resending a call that could not reach an instance (its node died
# and Ray is restarting it elsewhere, or it was just reclaimed) before answering 503.
RESTART_WINDOW = 30.0
_IDEMPOTENT = frozenset({"GET", "HEAD"})
# A request with this header may be resent too: the host it reaches deduplicates it (a keyed
# request that already ran answers its outcome, or attaches to its task).
_IDEMPOTENCY_HEADER = b"idempotency-key"
# How Ray words an error for a call that never reached the actor (connection refused).
_UNDELIVERED_SIGNS = ("failed to connect", "Connection refused", "The actor is restarting")
# Seconds between an actor's recorded end and a call's sending before the call counts as
# sent to an actor already dead (clocks of head and front end differ a little).
_CLOCK_MARGIN = 0.5
# How Ray words the death of an actor's process or node (not an end on purpose).
_DIED_SIGNS = ("worker process has died", "node")

__all__ = [
    "RESTART_WINDOW",
    "RayInstances",
    "actor_name",
    "forwarded_env",
    "is_instance_name",
]


def _resendable(request: ForwardedRequest) -> bool:
    """Whether a call may run twice without harm: a GET, or a request with an
    ``Idempotency-Key`` (see ``mail.server.idempotency``)."""
    if request.method in _IDEMPOTENT:
        return True
    return any(name.lower() == _IDEMPOTENCY_HEADER for name, _ in request.headers)


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
        # With a warm pool, instance hosts are handed out by the deployment's directory.
        self.pool: Any = None
        # Instances reached but not yet answering: name -> when (see `_answered`).
        self._starting: dict[str, float] = {}
        if config.cluster.warm_pool > 0:
            from mail.cluster.warm_pool import PoolClient

            self.pool = PoolClient(self, config.cluster.warm_pool)

    # -- connection ----------------------------------------------------------------------------

    def connect(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            requires_token = False
            try:
                if self.address == "local":
                    self._start_private_cluster()
                else:
                    check_reachable(self.address)
                    requires_token = head_requires_token(self.address)
                    if requires_token and (
                        not self._presents_token() or head_refuses_our_token(self.address)
                    ):
                        raise ClusterUnavailable(self._token_refused())
                    ray.init(
                        address=self.address,
                        namespace=self.namespace,
                        log_to_driver=False,
                        configure_logging=False,
                    )
            except ClusterUnavailable:
                raise
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}"
                if any(sign in text for sign in _AUTH_SIGNS) or requires_token:
                    # A head that wants a token and refused ours (Ray retries, then reports
                    # only that it could not connect).
                    raise ClusterUnavailable(self._token_refused()) from None
                if isinstance(exc, ConnectionError):
                    raise ClusterUnavailable(
                        f"cannot reach the Ray cluster at '{self.address}': {exc} "
                        "(start one with `ray start --head`, or set [server.cluster] address)"
                    ) from exc
                raise
            self._connected_here = True
            if self.address != "local" and _token_auth_off():
                logger.warning(
                    "Ray token authentication is off for the cluster at '%s': whoever reaches "
                    "its ports runs code with this server's environment. Set RAY_AUTH_MODE=token "
                    "and one token on every head, worker and front end (docs/security.md)",
                    self.address,
                )
        self._actor_class = ray.remote(InstanceActor)

    @staticmethod
    def _presents_token() -> bool:
        from mail.cluster.settings import AUTH_MODE, ray_token_available

        return os.environ.get(AUTH_MODE) == "token" and ray_token_available()

    def _token_refused(self) -> str:
        return (
            f"the Ray cluster at '{self.address}' refused this front end's token "
            "authentication (its token is missing or not the cluster's): export "
            "RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN, "
            "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) as on its head and workers; "
            "see docs/security.md"
        )

    def _start_private_cluster(self) -> None:
        """``address = "local"``: a single-node cluster of this process and for it alone."""
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
        """Forget the handles; the actors (instances) live on for the other front ends."""
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
            if name not in self._starting:
                # Its host may be a new worker process (the first of a cluster takes longest):
                # said, so a first request that waits is not a silent one.
                logger.info(
                    "instance %s: reaching its host on the Ray cluster (started if new)", name
                )
                self._starting[name] = time.monotonic()
            if self.pool is not None:
                try:
                    handle = await self.pool.assign(
                        name, caller_to_dict(caller), self.template_json
                    )
                except self.ray.exceptions.RayTaskError as exc:
                    raise self._refused(name, None, exc) or exc from None
            else:
                handle = await asyncio.to_thread(self._get_or_create, name, caller)
            self._handles[name] = handle
        return handle

    async def continue_tasks(self, key: Any) -> bool:
        """A front end's start-up resume (``InstanceManager.resume_running``): the host of
        the instance at ``key`` (an ``InstanceKey``) is started if it has none, and restores
        the instance and continues its running tasks by itself. A live host is only found:
        the front end claims nothing (a host claims its instance when it starts)."""
        caller = Caller(role=key.caller_role, id=key.caller_id, api_key="")
        name = actor_name(key.swarm_name, caller)
        handle = await self.actor(key.swarm_name, caller)
        try:
            # Bounded: a host Ray cannot place now leaves its tasks to the caller's next
            # request, not the callers after it in the resume to wait.
            await asyncio.wait_for(handle.ready.remote(), RESUME_READY)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as exc:
            self._handles.pop(name, None)
            raise self._refused(name, handle, exc) or exc from None
        self._answered(name)
        return True

    def _answered(self, name: str) -> None:
        """An instance answered: the first answer after its start is logged, with the wait."""
        started = self._starting.pop(name, None)
        if started is not None:
            logger.info("instance %s: ready after %.1f s", name, time.monotonic() - started)

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
                time.sleep(0.05)
        raise ClusterUnavailable(f"cannot create instance actor {name}: {last}")

    async def lookup(self, name: str) -> Any:
        """The actor of instance ``name`` now (not cached); ValueError when it has none."""
        if self.pool is None:
            return await asyncio.to_thread(self.ray.get_actor, name, self.namespace)
        handle = await self.pool.lookup(name)
        if handle is None:
            raise ValueError(f"no instance actor {name}")
        return handle

    def forget(self, swarm: str, caller: Caller) -> None:
        self._handles.pop(actor_name(swarm, caller), None)

    def list_instances(self) -> list[str]:
        if self.pool is not None:
            return self.pool.names()
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

    def _refused(self, name: str, handle: Any, exc: BaseException) -> StoreUnavailableError | None:
        """The instance's refusal for want of its database (no connection to spare, out of
        reach), taken out of Ray's error, whose text is Ray's traceback in terminal colours:
        its own line, for a 503; None for any other error. A host whose start failed is ended
        (the directory ends a pooled one): the next request starts a new one."""
        cause: Any = exc
        while isinstance(cause, self.ray.exceptions.RayTaskError):
            cause = getattr(cause, "cause", None)
        if not isinstance(cause, StoreUnavailableError):
            return None
        line = " ".join(str(cause).split())
        logger.warning("instance %s: %s", name, line)
        if isinstance(cause, InstanceStartFailed) and handle is not None and self.pool is None:
            self._handles.pop(name, None)
            with contextlib.suppress(Exception):
                self.ray.kill(handle, no_restart=True)
        return StoreUnavailableError(line)

    def _retryable(self, exc: BaseException, idempotent: bool, sent_at: float = 0.0) -> bool:
        """Whether sending the call again is safe: it never ran, or running twice is harmless."""
        errors = self.ray.exceptions
        if isinstance(exc, errors.ActorUnavailableError):
            text = str(exc)
            return idempotent or any(sign in text for sign in _UNDELIVERED_SIGNS)
        if isinstance(exc, errors.ActorDiedError):
            # A pooled host is never restarted by Ray: a call in flight when its process or
            # node died fails here, and may have run (an actor that ended on purpose refused
            # every call before it ended).
            if idempotent or not any(sign in str(exc) for sign in _DIED_SIGNS):
                return True
            return self._dead_before(exc, sent_at)
        return isinstance(exc, errors.RayTaskError) and isinstance(
            getattr(exc, "cause", None), InstanceClosing
        )

    def _dead_before(self, exc: BaseException, sent_at: float) -> bool:
        """Whether the actor had died (Ray's record of its end) before the call was sent: the
        call then never ran (a front end learns of a host's death only by using it)."""
        actor_id = getattr(exc, "actor_id", None)
        if not actor_id or not sent_at:
            return False
        try:
            from ray._private import state

            ended = float(state.actors(actor_id=actor_id).get("EndTime") or 0) / 1000
        except Exception:  # noqa: BLE001 - unknown: not resent
            return False
        return 0 < ended < sent_at - _CLOCK_MARGIN

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
        """Run ``caller``'s request in the existing instance ``<swarm>/<kind>/<ident>``."""
        name = f"{swarm}/{kind}/{ident}"
        return await self._unary(name, caller, request, lambda: self.existing(name))

    async def existing(self, name: str) -> Any | None:
        handle = self._handles.get(name)
        if handle is None and self.pool is not None:
            handle = await self.pool.lookup(name)
            if handle is None:
                return None
            self._handles[name] = handle
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
        idempotent = _resendable(request)
        attempt = 0
        while True:
            handle = await locate()
            if handle is None:
                return None
            sent_at = time.time()
            try:
                result: UnaryResponse = await handle.unary.remote(caller_to_dict(caller), request)
                self._answered(name)
                return result
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as exc:
                self._handles.pop(name, None)
                refused = self._refused(name, handle, exc)
                if refused is not None:
                    raise refused from None
                if not self._retryable(exc, idempotent, sent_at) or not await self._retry_pause(
                    attempt, deadline
                ):
                    raise
                attempt += 1

    async def stream(
        self, swarm: str, caller: Caller, request: ForwardedRequest
    ) -> AsyncIterator[dict[str, Any]]:
        deadline = asyncio.get_running_loop().time() + RESTART_WINDOW
        idempotent = _resendable(request)
        attempt = 0
        while True:
            handle = await self.actor(swarm, caller)
            sent_at = time.time()
            refs = handle.stream.remote(caller_to_dict(caller), request)
            started = finished = False
            try:
                async for ref in refs:
                    message = await ref
                    if not started:
                        self._answered(actor_name(swarm, caller))
                    started = True
                    yield message
                finished = True
                return
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as exc:
                self.forget(swarm, caller)
                refused = None if started else self._refused(actor_name(swarm, caller), handle, exc)
                if refused is not None:
                    raise refused from None
                if (
                    started
                    or not self._retryable(exc, idempotent, sent_at)
                    or not await self._retry_pause(attempt, deadline)
                ):
                    raise
                attempt += 1
            finally:
                if not finished:  # the client went away: stop the host's request too
                    with contextlib.suppress(Exception):
                        self.ray.cancel(refs)
