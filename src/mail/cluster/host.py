"""What runs inside one instance actor: the caller's swarm instance behind the server's routes.

On start the host claims the next generation of its instance in the store (fencing out a
host that lost its node), restores it and resumes its tasks. Nothing here imports Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

from mail.server.auth import Caller, ForwardedAuthenticator
from mail.server.backends import ForwardedRequest, UnaryResponse
from mail.store.base import StoreUnavailableError

logger = logging.getLogger("mail.cluster")

# Seconds a streamed event may wait for the store to acknowledge it durably before it is sent
# anyway (the database is down: the single-process behaviour, events not yet durable).
_DURABLE_WAIT = 5.0


class InstanceClosing(RuntimeError):
    """The host is being reclaimed; the request did not run and may be sent to a new host."""


class InstanceStartFailed(StoreUnavailableError):
    """The host could not start its instance (its database refused it: no connection to
    spare, out of reach), in one line; the request did not run. The front end ends such a
    host (it may hold some of its pools open) and answers 503: a new host starts at the next
    request."""


def caller_from_dict(data: dict[str, Any]) -> Caller:
    return Caller(
        role=str(data["role"]),
        id=str(data["id"]),
        api_key=str(data["api_key"]),
        swarm=data.get("swarm"),
    )


def caller_to_dict(caller: Caller) -> dict[str, Any]:
    return {"role": caller.role, "id": caller.id, "api_key": caller.api_key, "swarm": caller.swarm}


# The caller of a warm host that has not adopted an instance yet.
_NOBODY = Caller(role="", id="", api_key="", swarm=None)


def instance_config_json(config_json: str) -> str:
    """The front end's configuration as an instance host uses it."""
    from mail.config import ServerConfig

    config = ServerConfig.model_validate_json(config_json)
    # A host loads its one caller's instance itself (`InstanceHost._start`), never others'.
    settings = config.settings.model_copy(
        update={"gc_tuning": False, "resume_instances_at_start": 0}
    )
    cluster = config.cluster.model_copy(update={"backend": "none"})
    # Every front end and instance host of the deployment uses the one registry file.
    swarm = config.swarm.model_copy(update={"registry_shared": True})
    # A host delivers what its instance records; retries and takeovers are the front ends'.
    webhooks = config.webhooks.model_copy(update={"poll": False})
    # The front ends schedule crons and start their runs in the callers' hosts.
    crons = config.crons.model_copy(update={"enabled": False})
    return config.model_copy(
        update={
            "ui": False,
            "access_log": False,
            "settings": settings,
            "cluster": cluster,
            "swarm": swarm,
            "webhooks": webhooks,
            "crons": crons,
        }
    ).model_dump_json(by_alias=False)


class InstanceHost:
    """One caller's instance and the application that serves it."""

    def __init__(
        self,
        config_json: str,
        caller: dict[str, Any] | None,
        env: dict[str, str] | None = None,
        *,
        template_json: str | None = None,
    ) -> None:
        self.config_json = config_json
        self.template_json = template_json
        # None for a warm host (``cluster.warm_pool``) until it adopts an instance.
        self.caller: Caller = caller_from_dict(caller) if caller else _NOBODY
        self.env = dict(env or {})
        self.app: Any = None
        self.generation: int | None = None
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.open_requests = 0
        self.last_used = time.monotonic()
        self.fenced = False
        self.closing = False
        # Called once when a newer host took the instance over (the owner ends this host).
        self.on_lost: Any = None
        # Whether it was a warm host, ready before it adopted its instance (warm_pool).
        self.adopted_warm = False
        self._auth = ForwardedAuthenticator()
        if caller:
            self._auth.remember(self.caller)
        self._lifespan: Any = None
        self._prepared: asyncio.Task[None] | None = None
        self._prepared_template: str | None = None
        self._started: asyncio.Task[None] | None = None

    @property
    def adopted(self) -> bool:
        return self.caller is not _NOBODY

    # -- life cycle ----------------------------------------------------------------------------

    def start_soon(self) -> asyncio.Task[None]:
        """Start (once) in the background: restore and resume without waiting for a request."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        return self._started

    async def ready(self) -> None:
        if not self.adopted:
            raise InstanceClosing("this host has no instance yet")
        try:
            await asyncio.shield(self.start_soon())
        except Exception as exc:
            from mail.store.postgres_schema import refusal_reason

            raise InstanceStartFailed(
                f"this caller's instance cannot start now: {refusal_reason(exc)}"
            ) from exc

    def prepare_soon(self) -> asyncio.Task[None]:
        """Build the application and open its store (once): everything but the instance."""
        if self._prepared is None:
            self._prepared = asyncio.get_running_loop().create_task(self._prepare())
        return self._prepared

    def adopt(self, caller: dict[str, Any], template_json: str | None) -> asyncio.Task[None]:
        """Make a warm host the host of ``caller``'s instance (claim, restore, resume)."""
        if self.adopted:
            raise RuntimeError("this host already has an instance")
        self.caller = caller_from_dict(caller)
        self._auth.remember(self.caller)
        self.template_json = template_json
        self.adopted_warm = self._prepared is not None and self._prepared.done()
        return self.start_soon()

    async def _prepare(self) -> None:
        # The environment is the process's own (a Ray worker started with it); a host never
        # changes it, so one run in-process (tests) leaves no trace in its caller.
        from mail.cluster.owned import router as owned_router
        from mail.config import ServerConfig
        from mail.server.app_factory import create_app

        config = ServerConfig.model_validate_json(instance_config_json(self.config_json))
        template = None
        self._prepared_template = self.template_json
        if self.template_json:  # loaded through POST /swarms/load (deployment.SharedState)
            from mail.api import MAILSwarmTemplate

            template = MAILSwarmTemplate.from_swarm_json(self.template_json)
        self.app = create_app(config, authenticator=self._auth, template=template)
        self.app.include_router(owned_router)
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()

    async def _start(self) -> None:
        await asyncio.shield(self.prepare_soon())
        if self._prepared_template != self.template_json:  # warmed before a POST /swarms/load
            await self.stop_app()
            self._prepared = None
            await asyncio.shield(self.prepare_soon())
        # What an admin may ask of this instance from another one (see cluster.owned).
        self.app.state.cluster_owner = (self.caller.role, self.caller.id)
        state = self.app.state.mail
        await self._claim(state)
        # Created now, so a restarted host continues its running tasks by itself.
        await state.instances.get(self.caller.role, self.caller.id, self.caller.api_key)
        logger.info(
            "instance %s:%s ready on %s (generation %s)",
            self.caller.role,
            self.caller.id,
            self.holder,
            self.generation,
        )

    async def _claim(self, state: Any) -> None:
        store = state.store
        claim = getattr(store, "claim_generation", None)
        if claim is None:
            return
        from mail.server.instances import instance_kind
        from mail.store import InstanceKey

        key = InstanceKey(state.swarm_name, instance_kind(self.caller.role), self.caller.id)
        self.generation = int(await claim(key, self.holder))
        if hasattr(store, "on_fenced"):
            store.on_fenced = self._on_fenced

    def _on_fenced(self, key: Any) -> None:
        if not self.fenced:
            self.fenced = True
            self.closing = True
            logger.warning("instance %s was taken over by a newer host; stopping", key)
            if self.on_lost is not None:
                self.on_lost()

    async def stop(self) -> None:
        for task in (self._started, self._prepared):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        await self.stop_app()

    async def stop_app(self) -> None:
        if self._lifespan is not None:
            lifespan, self._lifespan = self._lifespan, None
            await lifespan.__aexit__(None, None, None)

    # -- state the actor reports ---------------------------------------------------------------

    def instance(self) -> Any | None:
        state = getattr(self.app.state, "mail", None) if self.app is not None else None
        if state is None:
            return None
        return state.instances.peek(self.caller.role, self.caller.id)

    def idle_for(self) -> float:
        """Seconds without requests, or 0 while anything keeps the instance busy."""
        if self._started is None or not self._started.done():
            return 0.0  # still restoring (and resuming its tasks)
        inst = self.instance()
        if self.open_requests or (inst is not None and (inst.in_use or inst.has_running_tasks())):
            return 0.0
        return time.monotonic() - self.last_used

    def describe(self) -> dict[str, Any]:
        inst = self.instance()
        return {
            "caller": {"role": self.caller.role, "id": self.caller.id} if self.adopted else None,
            "holder": self.holder,
            "generation": self.generation,
            "pid": os.getpid(),
            "running_tasks": 0
            if inst is None
            else sum(1 for t in inst.swarm.get_all_tasks().values() if t.is_running),
            "open_requests": self.open_requests,
            "adopted_warm": self.adopted_warm,
            "fenced": self.fenced,
        }

    async def has_task(self, task_id: str) -> bool:
        """Whether this host's instance has the task, live, archived or stored (creates
        nothing)."""
        from mail.cluster.owned import has_task

        if self.closing or not self.adopted:
            return False
        await self.ready()
        return await has_task(self.app.state.mail, self.caller.role, self.caller.id, task_id)

    async def loop_running(self) -> bool:
        """Whether this host's instance exists and its runtime loop runs (``GET /status``)."""
        if self.closing or not self.adopted:
            return False
        await self.ready()
        inst = self.instance()
        return inst is not None and bool(inst.is_running())

    def owned(self, request: ForwardedRequest) -> ForwardedRequest:
        """An admin's request about this host's own instance (``cluster.owned``'s routes)."""
        from mail.cluster.owned import OWNED_PREFIX

        return dataclasses.replace(request, path=OWNED_PREFIX + request.path)

    def owner(self) -> dict[str, Any]:
        return caller_to_dict(self.caller)

    # -- requests ------------------------------------------------------------------------------

    async def unary(self, caller: dict[str, Any], request: ForwardedRequest) -> UnaryResponse:
        """Run one request to its end and return the whole response."""
        status, headers, chunks = 500, [], []
        async for message in self.stream(caller, request, durable=False):
            if message["type"] == "http.response.start":
                status, headers = message["status"], message.get("headers", [])
            else:
                chunks.append(message.get("body", b""))
        # An answer leaves only once what it reports is stored: a node that dies right after
        # cannot take it back (a restarted instance continues from at least this state).
        await self._wait_durable()
        return UnaryResponse(status, list(headers), b"".join(chunks))

    async def stream(
        self, caller: dict[str, Any], request: ForwardedRequest, *, durable: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The ASGI response messages of one request, as the application sends them."""
        if self.closing or not self.adopted:
            raise InstanceClosing("instance reclaimed")
        await self.ready()
        self._auth.remember(caller_from_dict(caller))
        self.open_requests += 1
        self.last_used = time.monotonic()
        outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        disconnected = asyncio.Event()
        body_sent = False

        async def receive() -> dict[str, Any]:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            await outbox.put(message)

        async def run() -> None:
            try:
                await self.app(self._scope(request), receive, send)
            finally:
                await outbox.put(None)

        runner = asyncio.get_running_loop().create_task(run())
        event_stream = False
        try:
            while True:
                message = await outbox.get()
                if message is None:
                    break
                if message["type"] == "http.response.start":
                    event_stream = durable and _is_event_stream(message.get("headers", []))
                elif event_stream and message.get("body"):
                    await self._wait_durable()
                yield message
            await runner  # re-raises an application error
        finally:
            disconnected.set()
            if not runner.done():
                runner.cancel()
                with contextlib.suppress(BaseException):
                    await runner
            self.open_requests -= 1
            self.last_used = time.monotonic()

    async def _wait_durable(self) -> None:
        inst = self.instance()
        flush = getattr(getattr(inst, "swarm", None), "flush_store", None)
        if flush is not None:
            await flush(_DURABLE_WAIT)

    def _scope(self, request: ForwardedRequest) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": "http",
            "path": request.path,
            "raw_path": request.path.encode("latin-1", "replace"),
            "query_string": request.query,
            "root_path": "",
            "headers": request.headers,
            "client": request.client,
            "server": ("127.0.0.1", 0),
            "state": {},
        }


def _is_event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.startswith(b"text/event-stream")
    return False
