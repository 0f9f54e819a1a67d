"""State a single server keeps in its process and a deployment shares: health, template, uptime."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import APIRouter, Depends, Request

from mail.server import handlers
from mail.server.auth import Caller, caller_admin
from mail.server.bodies import read_json_object
from mail.server.handlers import get_state
from mail.server.idempotency import idempotent
from mail.server.jsonio import JSONBody

logger = logging.getLogger("mail.cluster")

STATE_ACTOR = "_deployment"
# Seconds a front end waits for the shared state before answering from its own copy: writes
# (POST /health, POST /swarms/load) and reads of GET / and GET /health (a load balancer's
# health check must not stall while the actor is restarting).
STATE_TIMEOUT = 2.0
READ_TIMEOUT = 0.5
# Ray's resource of the head node: the state actor lives there, so the loss of a worker node
# never takes it (the head is the cluster's single point of failure anyway).
_HEAD_RESOURCE = "node:__internal_head__"


class DeploymentState:
    """The body of the deployment's state actor (plain data; no mail imports)."""

    def __init__(self) -> None:
        self.started_at = time.time()
        self.health: dict[str, str] | None = None
        self.template_json: str | None = None
        self.template_version = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "health": self.health,
            "template_json": self.template_json,
            "template_version": self.template_version,
        }

    def set_health(self, status: str, timestamp: str) -> None:
        self.health = {"status": status, "timestamp": timestamp}

    def load_template(self, text: str) -> int:
        self.template_json = text
        self.template_version += 1
        return self.template_version


class SharedState:
    """A front end's handle on the deployment's state actor and the version it applied."""

    def __init__(self, instances: Any) -> None:
        self.instances = instances
        self._handle: Any = None
        self.template_version = 0
        self.app: Any = None  # the front end's application (its ServerState once started)
        # Before this front end first reaches a caller's actor (possibly creating it), it
        # catches up with a template another front end loaded.
        instances.before_create = self.catch_up

    def _actor(self) -> Any:
        if self._handle is None:
            ray = self.instances.ray
            self._handle = (
                ray.remote(DeploymentState)
                .options(
                    name=STATE_ACTOR,
                    namespace=self.instances.namespace,
                    get_if_exists=True,
                    lifetime="detached",
                    max_restarts=-1,
                    num_cpus=0,
                    resources={_HEAD_RESOURCE: 0.001},
                )
                .remote()
            )
        return self._handle

    async def warm(self, timeout: float = 120.0) -> None:
        """Make (or find) the state actor at start-up, so requests never wait for its start."""
        await self._call("snapshot", timeout=timeout)

    async def _call(self, method: str, *args: Any, timeout: float = STATE_TIMEOUT) -> Any:
        try:
            handle = await asyncio.to_thread(self._actor)
            return await asyncio.wait_for(getattr(handle, method).remote(*args), timeout)
        except Exception as exc:  # noqa: BLE001 - unreachable: this front end's own copy
            self._handle = None
            logger.warning("deployment state unavailable (%s): answering from this front end", exc)
            return None

    async def catch_up(self) -> None:
        state = getattr(getattr(self.app, "state", None), "mail", None)
        if state is not None:
            await self.refresh(state)

    async def refresh(self, state: Any, timeout: float = STATE_TIMEOUT) -> None:
        """Bring ``state`` (this front end's ServerState) up to the deployment's."""
        snap = await self._call("snapshot", timeout=timeout)
        if snap is None:
            return
        state.started_monotonic = time.monotonic() - max(0.0, time.time() - snap["started_at"])
        if snap["health"] is not None:
            state.health_status = snap["health"]["status"]
            state.health_timestamp = snap["health"]["timestamp"]
        if snap["template_version"] > self.template_version and snap["template_json"]:
            self._apply_template(state, snap["template_json"], snap["template_version"])

    def _apply_template(self, state: Any, text: str, version: int) -> None:
        from mail.api import MAILSwarmTemplate

        try:
            template = MAILSwarmTemplate.from_swarm_json(text)
        except Exception:  # noqa: BLE001 - it was valid where it was loaded
            logger.exception("cannot apply the deployment's loaded template here")
            return
        state.replace_template(template)
        self.instances.template_json = text  # new instance actors are built from it
        self.template_version = version

    async def health_changed(self, state: Any) -> None:
        await self._call("set_health", state.health_status, state.health_timestamp)

    async def template_loaded(self, state: Any, text: str) -> None:
        version = await self._call("load_template", text)
        self.instances.template_json = text
        if version is not None:
            self.template_version = int(version)


def _shared(request: Request) -> SharedState:
    shared: SharedState = request.app.state.cluster_shared
    return shared


router = APIRouter()


@router.get("/", include_in_schema=False)
async def root(request: Request) -> JSONBody:
    state = get_state(request)
    await _shared(request).refresh(state, READ_TIMEOUT)
    return JSONBody(handlers.root_body(state))


@router.get("/health", include_in_schema=False)
async def health(request: Request) -> JSONBody:
    state = get_state(request)
    await _shared(request).refresh(state, READ_TIMEOUT)
    return JSONBody(handlers.health_body(state))


@router.post("/health", include_in_schema=False)
async def update_health(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    state = get_state(request)
    reply = handlers.set_health(state, await read_json_object(request), caller.id)
    await _shared(request).health_changed(state)
    return JSONBody(reply)


@router.post("/swarms/load", include_in_schema=False)
@idempotent()
async def load_swarm(request: Request, caller: Caller = Depends(caller_admin)) -> JSONBody:
    shared, state = _shared(request), get_state(request)
    await shared.refresh(state)
    # Validates (400 for a bad document) and applies it here, then shares it.
    reply, text = handlers.load_swarm(state, await read_json_object(request), caller.id)
    await shared.template_loaded(state, text)
    return JSONBody(reply)
