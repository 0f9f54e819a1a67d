"""Everything one running server holds, and how it is built and torn down.

``ServerState`` lives on ``app.state.mail``. Routes read from it; only the lifespan (``app.py``)
and the admin routes that swap the template write to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mail.config import ServerConfig
from mail.core.message import utc_now_iso
from mail.server.auth import Authenticator
from mail.server.instances import InstanceManager, maybe_await
from mail.server.stream_shutdown import OpenStreams, StreamSlots

logger = logging.getLogger("mail.server")

TEMPLATE_ENV_VAR = "MAIL_SERVER_TEMPLATE"


class StartupError(RuntimeError):
    """The server cannot start; the message is meant for a person (one line)."""


@dataclass
class ServerState:
    config: ServerConfig
    template: Any
    template_source: str
    auth: Authenticator
    instances: InstanceManager
    # The server's SwarmRegistry; built on first use (see get_registry) unless interswarm
    # needs it at startup, so plain servers don't pay for the HTTP client stack at boot.
    registry: Any | None = None
    # Interswarm router shared by every instance (None when the swarm has interswarm off).
    router: Any | None = None
    store: Any | None = None
    # Push delivery (mail.webhooks.service.WebhookService; None when [server.webhooks] is off).
    webhooks: Any | None = None
    # Scheduled tasks (mail.server.crons.CronScheduler; None when [server.crons] is off).
    crons: Any | None = None
    started_monotonic: float = field(default_factory=time.monotonic)
    health_status: str = "healthy"
    health_timestamp: str = field(default_factory=utc_now_iso)
    _registry_failed: bool = field(default=False, repr=False)
    # What start-up deferred, loaded after the first /health (mail.server.warmup.StartupWarmUp).
    warm_up: Any | None = field(default=None, repr=False)
    # Set by POST /swarms/load: GET / then describes the loaded template only (no fallback
    # to the startup swarm's [server.swarm] values).
    template_loaded: bool = field(default=False, repr=False)
    # The SSE streams being served; ended with a closing frame when shutdown begins.
    open_streams: OpenStreams = field(default_factory=OpenStreams, repr=False)
    # Open event streams per caller ([server.settings] max_event_streams_per_caller).
    stream_slots: StreamSlots = field(default_factory=lambda: StreamSlots(0), repr=False)
    # Finished tasks out of memory, the per-caller storage books and retention
    # (server/finished_tasks.py, retention.py); set at start-up, before any request.
    finished: Any = field(default=None, repr=False)
    quota: Any = field(default=None, repr=False)
    retention: Any = field(default=None, repr=False)
    # Idempotency-Key records and the keyed requests under way (server/idempotency.py).
    idempotency: Any | None = field(default=None, repr=False)
    # Background messages' tasks (POST /message answered 202), held until they end.
    background: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.stream_slots.limit = self.config.settings.max_event_streams_per_caller

    @property
    def swarm_name(self) -> str:
        return self.config.swarm.name

    @property
    def base_url(self) -> str:
        return self.config.base_url

    @property
    def default_entrypoint(self) -> str:
        return str(getattr(self.template, "entrypoint", ""))

    def get_registry(self) -> Any | None:
        """The server registry, created (and its file loaded) the first time it is needed."""
        if self.registry is None and not self._registry_failed:
            try:
                self.registry = build_registry(self.config, self.template)
            except Exception:
                self._registry_failed = True
                logger.exception(
                    "cannot create the swarm registry from %s", self.config.swarm.registry_file
                )
        return self.registry

    def uptime(self) -> float:
        return time.monotonic() - self.started_monotonic

    def set_health(self, status: str) -> None:
        self.health_status = status
        self.health_timestamp = utc_now_iso()

    def replace_template(self, template: Any) -> None:
        """New instances use ``template``; existing ones keep theirs until reclaimed."""
        self.template = template
        self.template_source = "<loaded via POST /swarms/load>"
        self.template_loaded = True

    # -- the template's public description --------------------------------------------

    def public_swarm_name(self) -> str:
        """The name GET / and GET /health show: the loaded template's, after /swarms/load.

        (`swarm_name` stays the configured one: it is this server's interswarm identity.)
        """
        if self.template_loaded:
            return str(getattr(self.template, "name", "") or self.swarm_name)
        return self.swarm_name

    def swarm_info(self) -> dict[str, Any]:
        """GET /'s swarm: the template's, [server.swarm] filling what it leaves out (until
        POST /swarms/load: then the loaded template's alone)."""
        t, own = self.template, None if self.template_loaded else self.config.swarm
        return {
            "name": self.public_swarm_name(),
            "version": str(getattr(t, "version", "")),
            "description": getattr(t, "description", "") or (own.description if own else ""),
            "entrypoint": self.default_entrypoint,
            "keywords": list(getattr(t, "keywords", None) or (own.keywords if own else [])),
            "public": bool(getattr(t, "public", False) or (own is not None and own.public)),
        }

    def entrypoint_names(self) -> list[str]:
        agents = getattr(self.template, "agents", None) or []
        return [a.name for a in agents if getattr(a, "enable_entrypoint", False)]

    def agent_names(self) -> list[str]:
        return [a.name for a in getattr(self.template, "agents", None) or []]


# ----------------------------------------------------------------------------------------------
# Template loading


def import_object(spec: str) -> Any:
    """Resolve ``module:attr.path`` (an optional ``python::`` prefix is accepted)."""
    import importlib

    spec = spec.removeprefix("python::")
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise StartupError(f"{TEMPLATE_ENV_VAR} must look like 'module:attribute', got '{spec}'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr_path.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise StartupError(f"cannot import template '{spec}': {exc}") from exc
    return obj


def template_from_env() -> Any | None:
    """The template named by ``MAIL_SERVER_TEMPLATE`` (an object, or a zero-argument callable)."""
    spec = os.environ.get(TEMPLATE_ENV_VAR)
    if not spec:
        return None
    obj = import_object(spec)
    if callable(obj) and not hasattr(obj, "instantiate"):
        obj = obj()
    if not hasattr(obj, "instantiate"):
        raise StartupError(f"{TEMPLATE_ENV_VAR}={spec} is not a MAILSwarmTemplate")
    return obj


def check_swarm_source(name: str, source: str) -> None:
    """Fail early, with one readable line, when ``source`` can't provide swarm ``name``."""
    path = Path(source)
    if path.is_dir():
        raise StartupError(
            f"swarm source '{source}' is a folder, not a swarms.json file (set "
            "[server.swarm].source or --swarm-source to the file)"
        )
    if not path.is_file():
        raise StartupError(
            f"swarm source '{source}' does not exist (set [server.swarm].source or --swarm-source)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise StartupError(
            f"swarm source '{source}' cannot be read: {exc.strerror or exc}"
        ) from exc
    except ValueError as exc:
        raise StartupError(f"swarm source '{source}' is not valid JSON: {exc}") from exc
    if not isinstance(data, list):
        raise StartupError(
            f"swarms.json file at {source} must contain a list of swarms, actually got {type(data).__name__}"
        )
    names = [s["name"] for s in data if isinstance(s, dict) and isinstance(s.get("name"), str)]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = (
            f" Did you mean '{close[0]}'?"
            if close
            else (f" Available: {', '.join(names)}." if names else "")
        )
        raise StartupError(f"swarm '{name}' not found in {source}.{hint}")
    for entry in data:
        if isinstance(entry, dict) and entry.get("name") == name:
            try:
                from mail.swarms_json import validate_swarm_from_swarms_json

                validate_swarm_from_swarms_json(entry)
            except ImportError:  # pragma: no cover - the validator ships with the package
                pass
            except (ValueError, TypeError) as exc:
                raise StartupError(f"invalid swarm '{name}' in {source}: {exc}") from exc


def load_template(config: ServerConfig) -> Any:
    """Build the persistent template for ``[server.swarm]`` (after :func:`check_swarm_source`)."""
    check_swarm_source(config.swarm.name, config.swarm.source)
    from mail.api import MAILSwarmTemplate

    try:
        # [server.settings].task_message_limit applies (the original read it but never used it).
        return MAILSwarmTemplate.from_swarm_json_file(
            config.swarm.name,
            config.swarm.source,
            task_message_limit=config.settings.task_message_limit,
        )
    except StartupError:
        raise
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StartupError(
            f"cannot build swarm '{config.swarm.name}' from {config.swarm.source}: {first_line}"
        ) from exc


# ----------------------------------------------------------------------------------------------
# Optional collaborators


def build_registry(config: ServerConfig, template: Any) -> Any | None:
    try:
        from mail.net.registry import SwarmRegistry
    except ImportError as exc:  # pragma: no cover - net ships with the package
        logger.warning("swarm registry unavailable: %s", exc)
        return None
    return SwarmRegistry(
        config.swarm.name,
        config.base_url,
        config.swarm.registry_file,
        local_swarm_description=getattr(template, "description", "") or config.swarm.description,
        local_swarm_keywords=list(getattr(template, "keywords", None) or config.swarm.keywords),
        local_swarm_public=bool(getattr(template, "public", False) or config.swarm.public),
        shared=config.swarm.registry_shared or config.cluster.backend != "none",
    )


POOL_ENV = {"min_size": "MAIL_DB_POOL_MIN", "max_size": "MAIL_DB_POOL_MAX"}


def pool_sizes_from_env() -> dict[str, int]:
    """The task store's connection pool bounds from ``MAIL_DB_POOL_MIN``/``MAIL_DB_POOL_MAX``.

    Cluster mode sets small ones: every instance actor has its own pool, so the database
    sees one pool per live instance rather than one per server.
    """
    sizes: dict[str, int] = {}
    for option, var in POOL_ENV.items():
        value = os.environ.get(var, "").strip()
        if value:
            try:
                sizes[option] = max(1, int(value))
            except ValueError:
                logger.warning("ignoring %s=%r: not a whole number", var, value)
    if "min_size" in sizes and "max_size" in sizes:
        sizes["max_size"] = max(sizes["max_size"], sizes["min_size"])
    return sizes


async def start_store(config: Any = None) -> Any | None:
    """The started task store [server.store] and DATABASE_URL select; None for "memory"."""
    from mail.config import ServerConfig
    from mail.store import database_url_from_env, server_store

    config = config or ServerConfig()
    path = config.store.database_path(config.swarm.registry_file)
    store = server_store(
        config.store.kind,
        path,
        database_url_from_env(),
        max_pending=config.store.max_pending_writes,
        **pool_sizes_from_env(),
    )
    if store is None:
        return None
    await store.start()
    logger.info("persistence: %s", store.backend)
    return store


async def close_quietly(what: str, closer: Any) -> None:
    if closer is None:
        return
    with contextlib.suppress(Exception):
        try:
            await maybe_await(closer())
        except Exception:
            logger.exception("error while closing %s", what)
            raise
