"""The FastAPI application: ``create_app`` and its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from mail.config import ServerConfig, apply_cluster_env, cluster_enabled, load_config
from mail.server import (
    parked_answers,
    responses_bridge,
    routes_admin,
    routes_console,
    routes_interswarm,
    routes_public,
    routes_team,
    routes_user,
    routes_webhooks,
)
from mail.server.auth import Authenticator, build_authenticator
from mail.server.backends import cluster_backend, install_cluster_backend
from mail.server.errors import BodyLimitMiddleware, MAILFastAPI, install_error_handling
from mail.server.instances import InstanceManager, maybe_await
from mail.server.state import (
    ServerState,
    StartupError,
    close_quietly,
    load_template,
    start_store,
    template_from_env,
)
from mail.server.warmup import StartupWarmUp, schedule_warm_up
from mail.version import PROTOCOL_VERSION, __version__

logger = logging.getLogger("mail.server")

CONFIG_JSON_ENV_VAR = "MAIL_SERVER_CONFIG_JSON"
CORS_ORIGINS = ["http://localhost:3000", "http://127.0.0.1:3000"]


def config_from_env() -> ServerConfig:
    raw = os.environ.get(CONFIG_JSON_ENV_VAR)
    if raw:
        return ServerConfig.model_validate_json(raw)
    config = load_config().server
    cluster = apply_cluster_env(config.cluster.model_dump())
    return config.model_copy(update={"cluster": type(config.cluster).model_validate(cluster)})


async def _startup(
    app: FastAPI,
    config: ServerConfig,
    template: Any | None,
    authenticator: Authenticator | None,
    store: Any | None,
    template_source: str | None,
) -> ServerState:
    source = template_source or "<injected>"
    if template is None:
        template = template_from_env()
        source = f"<{os.environ.get('MAIL_SERVER_TEMPLATE')}>"
    if template is None:
        template = load_template(config)
        source = config.swarm.source
    name = getattr(template, "name", None)
    if (
        source != config.swarm.source
        and isinstance(name, str)
        and name
        and name != config.swarm.name
    ):
        # An injected template names the swarm; [server.swarm].name only selects from a file.
        config = config.model_copy(update={"swarm": config.swarm.model_copy(update={"name": name})})
    Path(config.swarm.registry_file).parent.mkdir(parents=True, exist_ok=True)
    auth = authenticator or build_authenticator(config)
    if store is None:
        try:
            store = await start_store(config)
        except Exception as exc:
            raise StartupError(f"cannot start persistence: {exc}") from exc
    backend = cluster_backend(app)
    if backend is not None:
        if getattr(store, "backend", None) != "postgres":
            raise StartupError(
                "cluster mode keeps instances in PostgreSQL: set DATABASE_URL "
                '(or [server.cluster] backend = "none")'
            )
        await backend.start()
    state_box: dict[str, ServerState] = {}
    instances = InstanceManager(
        lambda: state_box["state"].template,
        swarm_name=config.swarm.name,
        base_url=config.base_url,
        registry_file=config.swarm.registry_file,
        print_llm_streams=config.settings.print_llm_streams,
        task_message_limit=config.settings.task_message_limit,
        idle_timeout=config.settings.instance_idle_timeout,
        store=store,
    )
    instances.task_turn_limit = config.settings.task_turn_limit
    instances.task_repeat_limit = config.settings.task_repeat_limit
    instances.task_no_tool_call_limit = config.settings.task_no_tool_call_limit
    instances.max_message_body = config.settings.max_message_body or None
    state = ServerState(
        config=config,
        template=template,
        template_source=source,
        auth=auth,
        instances=instances,
        store=store,
    )
    state_box["state"] = state
    if store is not None and getattr(store, "backend", "") == "postgres":
        # Opened when an agent first remembers or recalls (see store/agent_memory_lazy.py).
        from mail.store.agent_memory_lazy import LazyAgentMemory

        instances.agent_memory = LazyAgentMemory(_start_agent_memory)
    await _start_interswarm(state)
    from mail.server.team import start_team_store, team_settings

    instances.team_store = await start_team_store(config, template, store)
    from mail.server.idempotency import start_guard

    state.idempotency = await start_guard(config, store)
    instances.team_settings = team_settings(config)
    _start_lifecycle(state)
    from mail.server.webhooks import start_webhooks

    try:
        state.webhooks = await start_webhooks(config, store, instances)
    except Exception as exc:
        raise StartupError(f"cannot start webhook delivery: {exc}") from exc
    from mail.server.crons import start_crons

    try:
        state.crons = await start_crons(state, backend)
    except Exception as exc:
        raise StartupError(f"cannot start scheduled tasks: {exc}") from exc
    instances.start()
    # In a cluster, the front end only makes sure each caller's instance host runs: the host
    # claims its instance and continues its tasks itself.
    instances.resume_soon(
        config.settings.resume_instances_at_start,
        None if backend is None else backend.continue_tasks,
    )
    if config.settings.gc_tuning:
        tune_gc()
    logger.info(
        "MAIL server v%s (protocol %s): swarm '%s' from %s, entrypoint '%s', auth %s, base url %s",
        __version__,
        PROTOCOL_VERSION,
        config.swarm.name,
        source,
        state.default_entrypoint,
        auth.mode,
        config.base_url,
    )
    return state


def _start_lifecycle(state: ServerState) -> None:
    """Finished tasks out of memory, per-caller storage quotas, retention ([server.store])."""
    from mail.server.finished_tasks import CallerLedger, FinishedTasks, StorageQuota
    from mail.server.retention import Retention

    settings = state.config.store
    quota = StorageQuota(settings.max_stored_bytes_per_caller, settings.max_stored_tasks_per_caller)
    finished = FinishedTasks(
        state.instances, state.store, quota, team_store=state.instances.team_store
    )
    state.instances.load_finished = finished.lifecycle is None  # (no store to read them from)
    state.instances.on_archive = finished.book_archived
    if quota.max_bytes:
        state.instances.ledger_for = functools.partial(CallerLedger, quota)
        if state.idempotency is not None:
            state.idempotency.book_outcome = quota.book_outcome
    retention = Retention(
        finished,
        state.instances,
        ttl=settings.finished_task_ttl,
        interval=settings.prune_interval,
    )
    state.quota, state.finished, state.retention = quota, finished, retention
    finished.start()
    retention.start()


# gen0 collections every 20k net allocations (default 700), each older generation after 20
# runs of the younger one (default 10): at hundreds of requests per second the default
# thresholds trigger full collections over every retained task record several times a minute.
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc() -> None:
    """Move everything alive after start-up out of the collector's way and relax thresholds.

    No collection first: a full pass here would delay readiness, and whatever start-up garbage
    is frozen with the rest is small and allocated once.
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _start_agent_memory() -> Any:
    """Agent memory in the same database as the tasks (in-memory if it cannot be reached)."""
    from mail.store import database_url_from_env
    from mail.store.agent_memory import create_agent_memory

    return await create_agent_memory(database_url_from_env(), fallback=True)


async def _start_interswarm(state: ServerState) -> None:
    """One router over the server registry, connected to each new instance (if enabled)."""
    if not getattr(state.template, "enable_interswarm", False):
        return
    registry = state.get_registry()
    if registry is None:
        return
    from mail.net.router import InterswarmRouter
    from mail.server import interswarm

    settings = state.config.settings
    router = InterswarmRouter(
        registry,
        state.swarm_name,
        request_timeout=settings.interswarm_timeout,
        retries=settings.interswarm_retries,
    )
    monitor = getattr(registry, "_health", None)
    if monitor is not None:
        monitor.interval = settings.health_check_interval
    await router.start()
    state.router = router
    await maybe_await(registry.start_health_checks())

    async def connect(swarm: Any) -> None:
        await interswarm.connect_instance(state, swarm)
        # Peers' answers kept while this instance was not loaded (`parked_answers`).
        await parked_answers.deliver(swarm)

    state.instances.on_create = connect
    logger.info("interswarm enabled for swarm '%s'", state.swarm_name)


async def _shutdown(state: ServerState, own_store: bool, backend: Any = None) -> None:
    # Webhook attempts under way get their few seconds from now, alongside the agents'
    # grace period below, not after it (docs/webhooks.md, "Stopping").
    deadline_of = getattr(state.webhooks, "close_deadline", None)
    webhooks_deadline = deadline_of() if deadline_of is not None else None
    # Built here if nobody needed it yet, so the registry file is always written at shutdown.
    registry = state.get_registry()
    if registry is not None:
        await close_quietly("registry health checks", getattr(registry, "stop_health_checks", None))
        await close_quietly(
            "registry volatile entries", getattr(registry, "cleanup_volatile_endpoints", None)
        )
        await close_quietly("registry", getattr(registry, "aclose", None))
    if state.retention is not None:
        await close_quietly("retention", state.retention.close)
    if state.crons is not None:  # no run starts once the instances stop
        await close_quietly("scheduled tasks", state.crons.close)
    await state.instances.close()
    if state.background:  # their tasks were told of the shutdown: they end now
        await asyncio.wait(set(state.background), timeout=5.0)
        for runner in state.background:
            runner.cancel()
    await close_quietly("finished tasks", state.finished.close)
    if state.webhooks is not None:
        await close_quietly("webhooks", functools.partial(state.webhooks.close, webhooks_deadline))
    if state.router is not None:
        await close_quietly("interswarm router", state.router.stop)
    if state.idempotency is not None:
        await close_quietly("idempotency keys", state.idempotency.close)
    await close_quietly("auth", state.auth.aclose)
    await close_quietly("cluster", getattr(backend, "close", None))
    # Together: each waits (up to its close timeout) for its queued writes, so a database
    # that is down at shutdown costs that wait once, not once per store.
    closing = [
        close_quietly("agent memory", getattr(state.instances.agent_memory, "close", None)),
        close_quietly("team store", getattr(state.instances.team_store, "close", None)),
    ]
    if own_store and state.store is not None:
        closing.append(close_quietly("store", state.store.close))
    await asyncio.gather(*closing)
    logger.info("MAIL server stopped")


def create_app(
    config: ServerConfig | None = None,
    *,
    template: Any | None = None,
    authenticator: Authenticator | None = None,
    store: Any | None = None,
    template_source: str | None = None,
    first_start: bool = False,
) -> FastAPI:
    """Build the application. Heavy work (template, store, registry) happens at startup.

    ``template`` injects a ready ``MAILSwarmTemplate`` (``template_source`` is only used in
    logs); ``authenticator`` and ``store`` replace the ones built from the config and
    environment (a given store is not closed at shutdown). ``first_start`` makes the startup
    do `mail server`'s first-start work first (keys, registry folder, SQLite database; see
    server/first_start.py), for servers started without the CLI. A `StartupError` at startup
    is reported as its one line (`MAILFastAPI`), not as a traceback.
    """
    config = config or config_from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            if first_start:
                from mail.server.first_start import prepare_first_start

                prepare_first_start(config)
            state = await _startup(app, config, template, authenticator, store, template_source)
        except StartupError as exc:
            app.state.startup_error = exc
            raise
        app.state.mail = state
        if isinstance(app, MAILFastAPI):
            app.idempotency_guard = state.idempotency
        warm_up = schedule_warm_up(state.template)
        state.warm_up = StartupWarmUp(state.template)
        state.warm_up.arm()
        try:
            yield
        finally:
            if warm_up is not None:
                warm_up.cancel()
            await state.warm_up.close()
            await _shutdown(
                state,
                own_store=store is None,
                backend=cluster_backend(app),
            )

    app = MAILFastAPI(
        title="MAIL server",
        version=PROTOCOL_VERSION,
        lifespan=lifespan,
        # The API is described by spec/openapi.yaml; no generated docs surface.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.config = config
    install_error_handling(app)
    install_cluster_backend(app, config)  # [server.cluster] backend; nothing for "none"
    app.add_middleware(BodyLimitMiddleware, limit=config.settings.max_request_body)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=CORS_ORIGINS,
        allow_credentials=True,
        allow_methods=["*"],
        allow_headers=["*"],
    )
    app.router.routes.append(routes_user.message_route)  # first: matched on every request
    app.include_router(routes_user.router)
    app.include_router(routes_public.router)
    app.include_router(routes_admin.router)
    app.include_router(routes_interswarm.router)
    app.include_router(routes_team.router)
    app.include_router(responses_bridge.router)
    app.include_router(routes_console.router)
    app.include_router(routes_webhooks.router)
    from mail.server.observability import install as install_observability

    install_observability(app, config)  # /metrics, tracing (OTEL_*), budget defaults
    from mail.server.api_docs import install_api_docs

    install_api_docs(app)
    # MCP face (docs/mcp.md); found by name: front doors sit above the server.
    install_front_doors(app, config, clustered=cluster_enabled(config))
    if config.ui:
        from mail.server.console import install_console

        install_console(app)
    return app


def run_server_with_template(
    template: Any,
    port: int = 8000,
    host: str = "0.0.0.0",
    task_message_limit: int | None = None,
    print_llm_streams: bool = True,
    **options: Any,
) -> None:
    """Serve ``template`` over HTTP (blocking), as ``MAILSwarmTemplate.start_server`` does.

    Debug routes are on, as in the original. Other ``mail.toml`` values apply; ``options`` may
    override any ``[server]`` key (e.g. ``log_level``). ``launch_ui`` (default true) serves the
    web console at ``/ui`` and ``open_browser`` (default true) opens it once the server is up;
    the original's ``ui_port``, ``ui_path`` and ``server_url`` are accepted and unused (the
    console is part of this server, not a separate app).
    """

    launch_ui = bool(options.pop("launch_ui", True))
    open_browser = bool(options.pop("open_browser", True))
    for unused in ("ui_port", "ui_path", "server_url"):
        if options.pop(unused, None) is not None:
            logger.info("start_server(%s=...) is accepted for compatibility and unused", unused)
    options.setdefault("ui", launch_ui)
    base = load_config().server
    data = base.model_dump(by_alias=False)
    data.update({"port": port, "host": host, "debug": True, **options})
    data["swarm"]["name"] = getattr(template, "name", data["swarm"]["name"])
    data["settings"]["print_llm_streams"] = print_llm_streams
    if task_message_limit is not None:
        template.task_message_limit = task_message_limit
        data["settings"]["task_message_limit"] = task_message_limit
    config = ServerConfig.model_validate(data)
    if not logging.getLogger().handlers:
        from mail.server.logs import setup_server_logging

        setup_server_logging(logging.INFO)
    # A script's server is a server's first start too: without the keys it prints (as `mail
    # server` does), a fresh folder's server answered every request 401 with no key to use.
    app = create_app(config, template=template, template_source="<injected>", first_start=True)
    from mail.server.stream_shutdown import closing_server

    server = closing_server(app, config)
    if config.ui:
        from mail.server.console import console_url, open_browser_when_ready

        url = console_url(config.base_url)
        print(f"MAIL console: {url}", flush=True)
        if open_browser:
            open_browser_when_ready(server, url)
    server.run()


# Front doors other than the REST routes: protocols that reach the same instances.
# name -> "module:function"; ``function(app, config)`` adds the door's routes to ``app``.
FRONT_DOORS: dict[str, str] = {
    "a2a": "mail.a2a.routes:install",
    "mcp": "mail.mcp_face:install",
}

# Doors that serve in-process instances only (they hold live objects of the instance), and
# their paths: in cluster mode those answer 501 saying so, rather than a bare 404.
LOCAL_ONLY_PATHS: dict[str, tuple[str, ...]] = {
    "a2a": ("/a2a", "/a2a/{path:path}", "/.well-known/agent-card.json", "/task/cancel"),
    "mcp": ("/mcp",),
}
LOCAL_ONLY = frozenset(LOCAL_ONLY_PATHS)


def install_front_doors(app: FastAPI, config: ServerConfig, *, clustered: bool) -> None:
    """Install every front door on ``app`` (those in :data:`LOCAL_ONLY` only without a cluster)."""
    for name, target in FRONT_DOORS.items():
        if clustered and name in LOCAL_ONLY:
            _install_unavailable(app, name)
            continue
        module_name, _, function_name = target.partition(":")
        install = getattr(importlib.import_module(module_name), function_name)
        install(app, config)


def _install_unavailable(app: FastAPI, name: str) -> None:
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    detail = (
        f"the {name} front door is not served in cluster mode ([server.cluster]): "
        "instances live in other processes (see docs/cluster.md, Limits)"
    )

    async def unavailable(request: Request) -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=501)

    for path in LOCAL_ONLY_PATHS[name]:
        app.add_route(path, unavailable, methods=["GET", "POST", "DELETE"])


__all__ = ["StartupError", "create_app", "run_server_with_template"]
