"""`mail server`: run the HTTP server."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

_TRUE = {"true", "t", "1", "yes", "y"}
_FALSE = {"false", "f", "0", "no", "n"}


def _bool_arg(value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c", "--config", help="path to mail.toml (sets MAIL_CONFIG_PATH for this run)"
    )
    parser.add_argument("-p", "--port", type=int, help="port to listen on")
    parser.add_argument("-H", "--host", help="interface to bind")
    # default=None so that "not given" leaves the config value alone.
    parser.add_argument(
        "-r", "--reload", action="store_true", default=None, help="reload on code changes"
    )
    parser.add_argument(
        "-d", "--debug", action="store_true", default=None, help="enable debug routes"
    )
    parser.add_argument("-n", "--swarm-name", help="swarm to serve from the swarm source")
    parser.add_argument("-s", "--swarm-source", help="path to swarms.json")
    parser.add_argument("-rf", "--swarm-registry", help="registry persistence file")
    parser.add_argument(
        "--print-llm-streams",
        type=_bool_arg,
        metavar="true|false",
        help="print LLM stream chunks to the server console",
    )
    parser.add_argument("--log-level", help="debug, info, warning or error")
    parser.add_argument(
        "--cluster",
        choices=("none", "ray"),
        help="where instances live: in this process (none) or in Ray actors (ray)",
    )
    parser.add_argument("--cluster-address", help="Ray cluster address: auto, local or ray://...")
    parser.add_argument("--cluster-namespace", help="Ray namespace shared by the front ends")
    parser.add_argument(
        "--store",
        choices=("sqlite", "memory", "postgres"),
        help="where tasks are kept: a SQLite file (default), memory (lost on restart) "
        "or PostgreSQL (DATABASE_URL)",
    )


def _fail(message: str) -> int:
    print(f"mail server: error: {message}", file=sys.stderr)
    return 2


def _config_hint(args: argparse.Namespace, cfg: Any) -> str:
    """Which mail.toml placed a missing swarm source there, when it was not a flag."""
    source = getattr(args, "config_source", None)
    if args.swarm_source is not None or not source or Path(cfg.swarm.source).is_file():
        return ""
    if args.config or Path(source).resolve().parent != Path.cwd().resolve():
        return ""
    return (
        f"; the mail.toml in use is {source} (a mail.toml in the current folder is read "
        "instead of the checkout's), and a relative source is looked for beside it"
    )


def resolve_config(args: argparse.Namespace) -> Any:
    """The effective ``ServerConfig``: the file, then the flags that were given."""
    from mail.config import ServerConfig, load_config

    if args.config:
        os.environ["MAIL_CONFIG_PATH"] = args.config
    full = load_config(args.config, use_cache=False)
    args.config_warnings = list(full.warnings)
    args.config_source = full.source_path
    cfg = full.server
    data = cfg.model_dump(by_alias=False)  # (a relative source is the file's: load_config)
    from mail.cluster.settings import apply_cluster_env

    apply_cluster_env(data["cluster"])
    overrides = {
        ("port",): args.port,
        ("host",): args.host,
        ("reload",): args.reload,
        ("debug",): args.debug,
        ("log_level",): args.log_level,
        ("swarm", "name"): args.swarm_name,
        ("swarm", "source"): args.swarm_source,
        ("swarm", "registry_file"): args.swarm_registry,
        ("settings", "print_llm_streams"): args.print_llm_streams,
        ("cluster", "backend"): getattr(args, "cluster", None),
        ("cluster", "address"): getattr(args, "cluster_address", None),
        ("cluster", "namespace"): getattr(args, "cluster_namespace", None),
        ("store", "kind"): getattr(args, "store", None),
    }
    for path, value in overrides.items():
        if value is None:
            continue
        target = data
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    # A new swarm name without a registry flag gets its own registry file, not the old name's.
    if (
        args.swarm_name
        and not args.swarm_registry
        and cfg.swarm.registry_file == f"registries/{cfg.swarm.name}.json"
    ):
        data["swarm"]["registry_file"] = f"registries/{args.swarm_name}.json"
    return ServerConfig.model_validate(data)


def _bind(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP, not proto 0: asyncio disables Nagle only on such sockets' connections.
    from mail.server.errors import listening_socket

    return listening_socket(host, port)


def _check_database(cfg: Any) -> str | None:
    """Problem with the configured store (one line), or None when it can be used."""
    from mail.store import StoreUnavailableError, database_url_from_env, store_kind

    url = database_url_from_env()
    try:
        kind = store_kind(cfg.store.kind, url)
    except StoreUnavailableError as exc:
        return str(exc)
    if kind != "postgres":
        return None
    from mail.store import create_store

    async def probe() -> None:
        store = create_store(url)
        try:
            await store.start()
        finally:
            await store.close()

    import asyncio

    try:
        asyncio.run(probe())
    except Exception as exc:
        return f"cannot start persistence (DATABASE_URL): {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _check_cluster(cfg: Any) -> str | None:
    """Problem with cluster mode's requirements (one line), or None."""
    if cfg.cluster.backend == "none":
        return None
    from mail.store import database_url_from_env

    if cfg.store.kind == "memory" or not database_url_from_env():
        return (
            "cluster mode keeps instances in PostgreSQL, not in SQLite or memory: set "
            'DATABASE_URL (or run without --cluster / with [server.cluster] backend = "none")'
        )
    return None


def _connect_cluster(app: Any) -> None:
    """Join (or, for ``local``, start) the Ray cluster now, so a failure is one line."""
    backend = getattr(app.state, "cluster_backend", None)
    if backend is None:
        return
    from mail.cluster import ClusterUnavailable

    address = backend.instances.address
    # Ray takes tens of seconds to start (more on a first run): say what is happening.
    if address == "local":
        print("Starting a private Ray cluster for this server...", flush=True)
    else:
        print(f"Joining the Ray cluster at {address}...", flush=True)
    started = time.monotonic()
    try:
        backend.instances.connect()
        print(
            f"Ray cluster ready ({time.monotonic() - started:.0f} s); a caller's instance "
            "starts on its first request",
            flush=True,
        )
    except ClusterUnavailable:
        raise
    except Exception as exc:  # Ray's own errors (authentication, version mismatch, ...)
        raise ClusterUnavailable(
            f"cannot join the Ray cluster at '{address}': {type(exc).__name__}: {_first_line(exc)}"
        ) from None


# The levels uvicorn understands (it fails with a KeyError on anything else).
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from mail.config import ConfigError

    try:
        cfg = resolve_config(args)
    except ConfigError as exc:
        return _fail(str(exc))
    except ValidationError as exc:  # pydantic validation of a flag value
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err.get("loc", ()))
        return _fail(f"invalid option: {where}: {err.get('msg')}")
    except ValueError as exc:  # any other bad flag value
        return _fail(f"invalid option: {str(exc).splitlines()[-1].strip()}")
    if cfg.log_level.lower() not in LOG_LEVELS:
        return _fail(
            f"invalid log level '{cfg.log_level}' (--log-level or [server].log_level): "
            f"use one of {', '.join(LOG_LEVELS)}"
        )

    from mail.server.auth import AuthConfigError, resolve_auth_mode
    from mail.server.first_start import prepare_first_start
    from mail.server.state import TEMPLATE_ENV_VAR, StartupError, check_swarm_source

    for warning in getattr(args, "config_warnings", None) or []:
        print(f"mail server: warning: {warning}", file=sys.stderr, flush=True)
    from mail.server.logs import setup_server_logging

    setup_server_logging(cfg.log_level)  # formatted and written off the event loop
    os.environ["SWARM_NAME"] = cfg.swarm.name
    os.environ["SWARM_SOURCE"] = cfg.swarm.source
    os.environ["SWARM_REGISTRY_FILE"] = cfg.swarm.registry_file
    os.environ.setdefault("BASE_URL", cfg.base_url)

    injected = os.environ.get(TEMPLATE_ENV_VAR)
    try:
        if not injected:
            check_swarm_source(cfg.swarm.name, cfg.swarm.source)
        resolve_auth_mode(cfg)  # a bad auth setting stops the start here, before binding
    except (StartupError, AuthConfigError) as exc:
        return _fail(str(exc) + _config_hint(args, cfg))

    problem = _check_cluster(cfg) or _check_database(cfg)
    if problem:
        return _fail(problem)

    try:
        sock = _bind(cfg.host, cfg.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return _fail(
                f"port {cfg.port} on {cfg.host} is already in use (choose another with --port)"
            )
        return _fail(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}")

    template: Any = None
    if not cfg.reload:
        try:
            from mail.server.state import load_template, template_from_env

            template = template_from_env() if injected else load_template(cfg)
        except StartupError as exc:
            sock.close()
            return _fail(str(exc))

    # Only now, with the swarm built and the port bound, are folders and keys created: a
    # start that fails leaves nothing behind and prints no keys that would never be used.
    try:
        prepare_first_start(cfg)
    except StartupError as exc:
        sock.close()
        return _fail(str(exc))

    import uvicorn

    from mail.server.http_protocol import http_protocol
    from mail.server.stream_shutdown import KEEP_ALIVE_SECONDS

    if cfg.reload:
        sock.close()
        from mail.server.app_factory import CONFIG_JSON_ENV_VAR

        os.environ[CONFIG_JSON_ENV_VAR] = cfg.model_dump_json(by_alias=False)
        uvicorn.run(
            "mail.server.app_factory:create_app",
            factory=True,
            host=cfg.host,
            port=cfg.port,
            reload=True,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            log_config=None,
            log_level=cfg.log_level.lower(),
            access_log=cfg.access_log,
            http=http_protocol(
                cfg.settings.request_head_timeout,
                cfg.settings.max_connections,
                cfg.settings.request_body_timeout,
            ),
            ws="none",
        )
        return 0

    from mail.server.app_factory import create_app

    source = f"{TEMPLATE_ENV_VAR}={injected}" if injected else cfg.swarm.source
    from mail.cluster import ClusterUnavailable

    try:
        app = create_app(cfg, template=template, template_source=source)
        _connect_cluster(app)
    except ClusterUnavailable as exc:
        sock.close()
        return _fail(str(exc))
    from mail.server.stream_shutdown import closing_server

    server = closing_server(
        app,
        cfg,
        log_level=cfg.log_level.lower(),
        lifespan="on",
        # Open requests and streams get this long to finish on SIGTERM/SIGINT.
        timeout_graceful_shutdown=int(cfg.cluster.drain_timeout)
        if cfg.cluster.backend != "none"
        else 10,
    )
    logging.getLogger("mail.server").info("listening on http://%s:%d", cfg.host, cfg.port)
    if cfg.ui:
        from mail.server.console import console_url

        print(f"MAIL console: {console_url(cfg.base_url)}", flush=True)
    # uvicorn handles SIGINT/SIGTERM itself (graceful shutdown), then re-raises the signal
    # against the handlers that were installed before it started. No-op handlers here make a
    # graceful stop exit with status 0 instead of a KeyboardInterrupt or a kill by SIGTERM.
    previous = {sig: signal.signal(sig, _ignore_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if server.started:
        from mail.commands import exit_at_once_when_done

        exit_at_once_when_done()
    return 0 if server.started else 1


def _ignore_signal(signum: int, frame: Any) -> None:
    del signum, frame
