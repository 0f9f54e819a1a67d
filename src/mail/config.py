"""Typed configuration read from ``mail.toml``.

The file is found by trying, in order: ``$MAIL_CONFIG_PATH`` (when it names an existing file),
``./mail.toml``, then the nearest ``mail.toml`` in a directory above the installed package (which
is the repository root in a checkout). A missing file, table or key falls back to the defaults
declared on the models below, so ``ServerConfig()`` and ``ClientConfig()`` always work.

Unlike the original, ``[server.settings]`` is read whether or not ``[server.swarm]`` is present,
and unknown keys are ignored rather than rejected, so a config written for a newer version still
loads; ``MAILConfig.warnings`` names each one (with the closest known key), and ``mail server``
prints them at start-up.
"""

from __future__ import annotations

import difflib
import logging
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# The file search and the [client] model live below this module (the client reads them
# without the server models); re-exported here, where callers have always found them.
from mail.client_config import CONFIG_ENV_VAR, CONFIG_FILE_NAME, ClientConfig, find_config_file
from mail.telemetry.settings import TelemetryConfig

logger = logging.getLogger("mail.config")


__all__ = [
    "CONFIG_ENV_VAR",
    "CONFIG_FILE_NAME",
    "AuthConfig",
    "ClientConfig",
    "ConfigError",
    "MAILConfig",
    "ServerConfig",
    "ServerSettings",
    "StdlibConfig",
    "StoreConfig",
    "SwarmConfig",
    "TeamToolsConfig",
    "apply_cluster_env",
    "cluster_enabled",
    "clear_config_cache",
    "current_stdlib_config",
    "find_config_file",
    "load_config",
    "load_config_file",
    "read_config_table",
]


class ConfigError(ValueError):
    """A configuration file that cannot be read or does not have the right shape."""


class _Section(BaseModel):
    # Unknown keys are tolerated so that older binaries can read newer files.
    model_config = ConfigDict(extra="ignore", populate_by_name=True, validate_assignment=True)


class SwarmConfig(_Section):
    """``[server.swarm]``: which swarm the server hosts and where its registry lives."""

    name: str = "demo"
    source: str = "swarms.json"
    registry_file: str = Field(default="registries/demo.json", alias="registry")
    description: str = ""
    keywords: list[str] = Field(default_factory=list)
    public: bool = False
    # Several processes use the registry file (cluster mode turns this on): each re-reads it
    # when it changed and changes it under a lock; volatile entries are kept in it too.
    registry_shared: bool = False

    @property
    def registry(self) -> str:
        return self.registry_file


class ServerSettings(_Section):
    """``[server.settings]``: runtime behaviour of the hosted swarm."""

    # Maximum number of counted messages per task before the runtime forces task_complete.
    # ``None`` (or 0 in the file) means unlimited.
    task_message_limit: int | None = Field(default=15, ge=0)
    print_llm_streams: bool = True
    # Seconds without a new event before an SSE stream sends an ``event: ping``.
    sse_ping_interval: float = Field(default=15.0, gt=0)
    # Seconds an instance may stay unused before it is shut down (0 disables reclaiming).
    instance_idle_timeout: float = Field(default=1800.0, ge=0)
    # Default time a non-streaming POST /message waits for the task to finish.
    message_timeout: float = Field(default=3600.0, gt=0)
    # Freeze start-up objects out of the cyclic GC and collect young objects less often;
    # keeps full-collection pauses (which grow with the number of retained tasks) rare.
    gc_tuning: bool = True
    # Seconds one interswarm HTTP request may take before the sending agent is told it failed.
    interswarm_timeout: float = Field(default=30.0, gt=0)
    # Seconds between health checks of registered remote swarms.
    health_check_interval: float = Field(default=30.0, gt=0)
    # Agent turns one task may take (each run of it) before it is stopped with a
    # ::task_error::; unlike task_message_limit this counts system notices too. 0 = no bound.
    task_turn_limit: int | None = Field(default=500, ge=0)
    # The same failing tool call (same tool and arguments) this many times in a row by one
    # agent stops the task with a ::task_error::. 0 = never.
    task_repeat_limit: int | None = Field(default=5, ge=0)
    # Bytes of SSE frames one stream may hold for a client that reads slower than the task
    # produces events. When the buffer stays full for `sse_slow_reader_timeout` seconds the
    # stream ends with `event: resubscribe` (continue with GET /task/events).
    sse_max_buffer_bytes: int = Field(default=1_048_576, ge=1024)
    sse_slow_reader_timeout: float = Field(default=10.0, gt=0)
    # Largest request body, in bytes, any route accepts (413 above it; 0 = no limit).
    max_request_body: int = Field(default=4 * 1024 * 1024, ge=0)
    # Largest message body, in characters, a caller or an agent may send (0 = no limit).
    max_message_body: int = Field(default=1024 * 1024, ge=0)
    # Event streams (POST /message stream, GET /task/events) one caller may hold open at
    # once; more are 429 with Retry-After (0 = no bound).
    max_event_streams_per_caller: int = Field(default=32, ge=0)
    # Tasks one caller may keep paused (at a breakpoint or waiting for a review) before a new
    # task is refused with 429 (0 = no bound).
    max_paused_tasks_per_caller: int = Field(default=100, ge=0)
    # A2A task records (GetTask, ListTasks, SubscribeToTask) kept per caller, in memory: past
    # either bound the caller's least recently updated records are forgotten (0 = no bound).
    max_a2a_tasks_per_caller: int = Field(default=1000, ge=0)
    max_a2a_task_bytes_per_caller: int = Field(default=32 * 1024 * 1024, ge=0)
    # Updates of an A2A peer shown, while it works, as events of the task that called it: per
    # call, and characters kept of each string of the peer's (an update's text, ids and names,
    # its error or failure text in an interswarm error) (0 = none shown / no text).
    max_a2a_peer_updates: int = Field(default=100, ge=0)
    max_a2a_peer_update_chars: int = Field(default=2000, ge=0)

    @field_validator("task_message_limit", "task_turn_limit", "task_repeat_limit", mode="before")
    @classmethod
    def _zero_means_unlimited(cls, value: Any) -> Any:
        if value in (0, "0", "", "none", "None"):
            return None
        return value


class AuthConfig(_Section):
    """``[server.auth]``: how bearer keys are checked.

    ``mode = "auto"`` uses the external auth service when both ``AUTH_ENDPOINT`` and
    ``TOKEN_INFO_ENDPOINT`` are set in the environment, and the local key file otherwise.
    """

    mode: Literal["auto", "local", "external"] = "auto"
    # Local mode: where hashed keys are kept. Empty = ``keys.json`` next to the registry file.
    keys_file: str = ""
    # External mode: seconds a successful lookup of one key is reused.
    token_cache_ttl: float = Field(default=60.0, ge=0)
    # External mode: timeout of each round trip to the auth service.
    request_timeout: float = Field(default=10.0, gt=0)


class TeamToolsConfig(_Section):
    """``[server.team_tools]``: limits and folders of the opt-in team tools."""

    # Default and maximum wait of send_request(wait_for_reply=true), in seconds.
    reply_timeout: float = Field(default=120.0, gt=0)
    reply_timeout_max: float = Field(default=600.0, gt=0)
    # Largest attachment (agent transfer_file or user upload on POST /message), in bytes.
    max_attachment_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    # Largest attachment read_attachment returns as text, in bytes.
    max_read_bytes: int = Field(default=256 * 1024, gt=0)
    # Agents' working folders (one sub-folder per instance). Empty = the instance's folder
    # of the ``[stdlib.fs]`` root, the same one the mail.stdlib file actions use.
    files_root: str = ""
    # Attachment bytes without DATABASE_URL. Empty = ``attachments`` next to the registry.
    attachments_dir: str = ""
    # Sizes of what agents and callers hand to the team tools (a thread post or an initial
    # message is bounded by [server.settings] max_message_body).
    max_title_chars: int = Field(default=200, gt=0)
    max_description_chars: int = Field(default=2000, gt=0)
    max_filename_chars: int = Field(default=255, gt=0)
    # Quotas per instance (one caller's swarm). Threads and attachment bytes are refused past
    # the quota; stored posts per thread and inbox entries per agent keep the newest ones.
    max_threads: int = Field(default=1000, gt=0)
    max_attachment_bytes_per_instance: int = Field(default=1024 * 1024 * 1024, gt=0)
    max_posts_per_thread: int = Field(default=10_000, gt=0)
    max_inbox_entries: int = Field(default=10_000, gt=0)


class McpConfig(_Section):
    """``[server.mcp]``: the MCP endpoint ``/mcp`` where outside agents join (docs/mcp.md)."""

    enabled: bool = True
    # External agents one caller's instance may have joined at once.
    max_agents_per_instance: int = Field(default=16, gt=0)
    # Cap on the timeout of wait_for_messages / wait_for_reply / post_message(wait), seconds.
    max_wait_seconds: float = Field(default=300.0, gt=0)
    # Open MCP sessions of the whole server, and seconds an idle session is kept.
    max_sessions: int = Field(default=1000, gt=0)
    session_idle_timeout: float = Field(default=1800.0, gt=0)
    # Long-polls (wait_for_messages / wait_for_reply) one outside agent may run at once.
    max_waits_per_agent: int = Field(default=4, gt=0)
    # Characters of the subject of a message an outside agent sends.
    max_subject_chars: int = Field(default=1000, gt=0)
    # Bytes of one answer to a tool call or resource read (the JSON-RPC message). The
    # mcp SDK's client refuses a server-sent event over 1 MiB; message lists hold as many
    # whole messages as fit, a longer body is cut and read on with read_message.
    max_reply_bytes: int = Field(default=512 * 1024, ge=4096)
    # Characters of a resource URI a client sends (resources/read, subscribe); longer ones
    # are refused before they are matched or echoed in an error.
    max_uri_chars: int = Field(default=2048, ge=64)


class ClusterConfig(_Section):
    """``[server.cluster]``: where instances live when there is more than one process.

    ``backend = "none"`` (the default) keeps every instance in this process. ``"ray"`` puts
    each instance in a named Ray actor (needs the ``cluster`` extra and ``DATABASE_URL``);
    see docs/cluster.md. ``MAIL_CLUSTER_BACKEND``, ``MAIL_CLUSTER_ADDRESS`` and
    ``MAIL_CLUSTER_NAMESPACE``, ``MAIL_CLUSTER_PUBLIC_URL`` and ``MAIL_CLUSTER_WARM_POOL``
    override the file.
    """

    backend: Literal["none", "ray"] = "none"
    # "auto" joins the Ray cluster of this machine (``ray start``); "ray://host:10001" a
    # remote one through Ray Client; "local" starts a private single-node cluster.
    address: str = "auto"
    # Ray namespace of the instance actors: front ends of one deployment share it.
    namespace: str = "mail"
    # Seconds a front end lets open requests and streams finish on SIGTERM.
    drain_timeout: float = Field(default=30.0, ge=0)
    # The deployment's URL as others reach it (its load balancer): what the registry and
    # interswarm messages announce instead of each front end's own host:port.
    public_url: str = ""
    # Instance hosts kept started per worker node (imports done, database pool open), ready
    # to adopt a new caller's instance or one whose node died; 0 starts each host on demand.
    # Off by default: with no warm host left, a dead host's instance came back on a cold host
    # without running its tasks again (docs/cluster.md, "Limits").
    warm_pool: int = Field(default=0, ge=0, le=8)


# ``MAIL_CLUSTER_*`` variables over ``[server.cluster]`` keys (mail.toml, then these, then flags).
CLUSTER_ENV = {
    "backend": "MAIL_CLUSTER_BACKEND",
    "address": "MAIL_CLUSTER_ADDRESS",
    "namespace": "MAIL_CLUSTER_NAMESPACE",
    "public_url": "MAIL_CLUSTER_PUBLIC_URL",
    "warm_pool": "MAIL_CLUSTER_WARM_POOL",
}


def apply_cluster_env(table: dict[str, Any]) -> dict[str, Any]:
    """Override the keys of a ``[server.cluster]`` dict from ``MAIL_CLUSTER_*`` variables."""
    for key, var in CLUSTER_ENV.items():
        value = os.environ.get(var)
        if value:
            table[key] = value.strip()
    return table


def cluster_enabled(config: Any) -> bool:
    cluster = getattr(config, "cluster", None)
    return cluster is not None and cluster.backend != "none"


class StoreConfig(_Section):
    """``[server.store]``: where the server keeps tasks, histories, threads and attachments.

    ``kind = "sqlite"`` (the default) keeps them in one SQLite file, ``path`` (empty:
    ``data/mail.db`` next to the registry's folder); ``"memory"`` keeps nothing across a
    restart; ``"postgres"`` uses ``DATABASE_URL`` (required then). ``DATABASE_URL`` set in
    the environment or ./.env selects PostgreSQL for ``"sqlite"`` too; ``"memory"`` ignores it.
    ``mail server --store`` overrides ``kind``. See docs/database.md.
    """

    kind: Literal["sqlite", "memory", "postgres"] = "sqlite"
    path: str = ""

    def database_path(self, registry_file: str) -> Path:
        """The SQLite file: ``path``, or ``data/mail.db`` beside the registry's folder."""
        if self.path:
            return Path(self.path).expanduser()
        return Path(registry_file).parent.parent / "data" / "mail.db"


class ServerConfig(_Section):
    """``[server]`` and its sub-tables."""

    port: int = Field(default=8000, ge=0, le=65535)
    host: str = "0.0.0.0"
    reload: bool = False
    debug: bool = False
    # One log line per request (uvicorn's access log).
    access_log: bool = True
    log_level: str = "info"
    # The web console at /ui (static assets; every API call it makes needs a key).
    ui: bool = True
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    settings: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    team_tools: TeamToolsConfig = Field(default_factory=TeamToolsConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)

    @property
    def base_url(self) -> str:
        """The URL other parties should use to reach this server (wildcard hosts → localhost)."""
        if self.cluster.public_url:
            return self.cluster.public_url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "localhost"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def keys_file_path(self) -> Path:
        """Resolved location of the local key file (``MAIL_KEYS_FILE`` wins over the config)."""
        env = os.environ.get("MAIL_KEYS_FILE")
        if env:
            return Path(env)
        if self.auth.keys_file:
            return Path(self.auth.keys_file)
        return Path(self.swarm.registry_file).parent / "keys.json"


# ---------------------------------------------------------------------------- [stdlib]
# Settings of the ready-made actions in ``mail.stdlib``. Every key can be overridden by an
# environment variable named ``MAIL_STDLIB_<TABLE>_<KEY>`` (e.g. ``MAIL_STDLIB_FS_ROOT``,
# ``MAIL_STDLIB_NET_ALLOWED_HOSTS=127.0.0.1,localhost``); lists are comma-separated there.

STDLIB_ENV_PREFIX = "MAIL_STDLIB_"


class StdlibFsConfig(_Section):
    """``[stdlib.fs]``: where the file actions may read and write."""

    # Every path an agent names must stay inside this folder (links are never followed). Empty
    # means a per-server folder: ``./mail_files/<server.swarm.name>`` under the working directory.
    root: str = ""
    # False (default): each caller's instance works in its own sub-folder ``<role>-<id>`` of
    # the root, so one caller's agents never see another caller's files. True: every caller
    # works in the root itself and all files are shared between callers.
    shared: bool = False
    max_read_bytes: int = Field(default=1_048_576, gt=0)
    max_write_bytes: int = Field(default=1_048_576, gt=0)


class StdlibNetConfig(_Section):
    """``[stdlib.net]``: the address guard shared by the http, interswarm and mcp actions."""

    # Host names (``api.internal``, ``*.corp.example``), IP addresses or networks (CIDR) that
    # may be reached even when they resolve to loopback, private or link-local addresses.
    allowed_hosts: list[str] = Field(default_factory=list)
    # True turns the guard off entirely (every address may be reached).
    allow_private_addresses: bool = False
    # Honour HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY from the environment.
    trust_env: bool = True


class StdlibHttpConfig(_Section):
    """``[stdlib.http]``: limits of the http and interswarm actions."""

    connect_timeout: float = Field(default=10.0, gt=0)
    read_timeout: float = Field(default=30.0, gt=0)
    # Upper bound for one whole call, redirects and body included.
    total_timeout: float = Field(default=60.0, gt=0)
    max_response_bytes: int = Field(default=1_048_576, gt=0)
    max_redirects: int = Field(default=10, ge=0)


class StdlibMcpConfig(_Section):
    """``[stdlib.mcp]``: which MCP servers the mcp actions may talk to."""

    # Local script paths (``.py`` / ``.js``) an agent may start as a stdio MCP server. Empty:
    # only ``http(s)://`` URLs are accepted.
    allowed_commands: list[str] = Field(default_factory=list)
    timeout: float = Field(default=30.0, gt=0)
    max_result_chars: int = Field(default=200_000, gt=0)
    # Bytes one MCP call may receive over HTTP (handshake and every page together), counted
    # in the transport while they arrive; more ends the call with an error.
    max_response_bytes: int = Field(default=4 * 1024 * 1024, gt=0)


class StdlibConfig(_Section):
    """``[stdlib]`` and its sub-tables."""

    fs: StdlibFsConfig = Field(default_factory=StdlibFsConfig)
    net: StdlibNetConfig = Field(default_factory=StdlibNetConfig)
    http: StdlibHttpConfig = Field(default_factory=StdlibHttpConfig)
    mcp: StdlibMcpConfig = Field(default_factory=StdlibMcpConfig)

    def with_env_overrides(self, environ: dict[str, str] | None = None) -> StdlibConfig:
        """A copy with ``MAIL_STDLIB_<TABLE>_<KEY>`` environment variables applied."""
        env = os.environ if environ is None else environ
        data = self.model_dump()
        changed = False
        for table, section in data.items():
            for key, current in section.items():
                raw = env.get(f"{STDLIB_ENV_PREFIX}{table.upper()}_{key.upper()}")
                if raw is None:
                    continue
                changed = True
                if isinstance(current, list):
                    section[key] = [part.strip() for part in raw.split(",") if part.strip()]
                else:
                    section[key] = raw
        if not changed:
            return self
        try:
            return StdlibConfig.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = "_".join(str(p).upper() for p in err.get("loc", ()))
            raise ConfigError(
                f"invalid environment value {STDLIB_ENV_PREFIX}{where}: {err.get('msg')}"
            ) from exc


class MAILConfig(_Section):
    """The whole file."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    client: dict[str, Any] = Field(default_factory=dict)
    stdlib: StdlibConfig = Field(default_factory=StdlibConfig)
    # Path the values were read from (None when only defaults are in use).
    source_path: str | None = None
    # One line per key of the file that no setting reads (a typo, usually).
    warnings: list[str] = Field(default_factory=list)


_cache: dict[str | None, MAILConfig] = {}


def clear_config_cache() -> None:
    _cache.clear()
    _stdlib_seen.clear()


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def _first_error(exc: ValidationError, path: Path | None) -> ConfigError:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    origin = f" in {path}" if path else ""
    return ConfigError(f"invalid config value{origin}: {where}: {err.get('msg')}")


def _field_names(model: type[BaseModel]) -> set[str]:
    names = set(model.model_fields)
    names |= {f.alias for f in model.model_fields.values() if f.alias}
    return names


def _known_tables() -> dict[str, type[BaseModel] | None]:
    """Each table of mail.toml -> the model that reads it (None: any key is read)."""
    client: type[BaseModel] | None = ClientConfig
    tables: dict[str, type[BaseModel] | None] = {
        "server": ServerConfig,
        "client": client,
        "stdlib": StdlibConfig,
    }
    for name in ("swarm", "settings", "auth", "team_tools", "cluster", "store"):
        tables[f"server.{name}"] = ServerConfig.model_fields[name].annotation  # type: ignore[assignment]
    for name in ("fs", "net", "http", "mcp"):
        tables[f"stdlib.{name}"] = StdlibConfig.model_fields[name].annotation  # type: ignore[assignment]
    return tables


def unknown_key_warnings(data: dict[str, Any], path: Path) -> list[str]:
    """One line per key no setting reads, with the closest known name when there is one."""
    tables = _known_tables()
    found: list[str] = []

    def check(table: str, keys: list[str], known: set[str]) -> None:
        for key in keys:
            if key in known:
                continue
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            where = f"[{table}]" if table else "the top level"
            found.append(f"{path}: unknown key '{key}' in {where} is ignored{hint}")

    check("", list(data), {name for name in tables if "." not in name})
    for table, model in tables.items():
        parent, _, child = table.partition(".")
        section = data.get(parent)
        if child:
            section = section.get(child) if isinstance(section, dict) else None
        if not isinstance(section, dict) or model is None:
            continue
        sub_tables = {t.partition(".")[2] for t in tables if t.startswith(f"{table}.")}
        check(table, list(section), _field_names(model) | sub_tables)
    return found


def load_config_file(path: str | Path | None) -> MAILConfig:
    """Parse one file (or the defaults when ``path`` is None) into a :class:`MAILConfig`."""
    if path is None:
        return MAILConfig()
    path = Path(path)
    data = _read_toml(path)
    server = data.get("server", {})
    if not isinstance(server, dict):
        raise ConfigError(f"config file {path}: [server] must be a table")
    for table in ("swarm", "settings", "auth", "team_tools", "cluster"):
        if table in server and not isinstance(server[table], dict):
            raise ConfigError(f"config file {path}: [server.{table}] must be a table")
    client = data.get("client", {})
    if not isinstance(client, dict):
        raise ConfigError(f"config file {path}: [client] must be a table")
    stdlib = data.get("stdlib", {})
    if not isinstance(stdlib, dict) or not all(
        isinstance(v, dict) for k, v in stdlib.items() if k in StdlibConfig.model_fields
    ):
        raise ConfigError(f"config file {path}: [stdlib] and its sub-tables must be tables")
    try:
        stdlib_config = StdlibConfig.model_validate(stdlib)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in ("stdlib", *err.get("loc", ())))
        raise ConfigError(f"invalid config value in {path}: {where}: {err.get('msg')}") from exc
    try:
        return MAILConfig(
            server=ServerConfig.model_validate(server),
            client=client,
            stdlib=stdlib_config,
            source_path=str(path),
            warnings=unknown_key_warnings(data, path),
        )
    except ValidationError as exc:
        raise _first_error(exc, path) from exc


def load_config(path: str | Path | None = None, *, use_cache: bool = True) -> MAILConfig:
    """Load the effective configuration (explicit ``path``, else the search order)."""
    resolved = Path(path) if path is not None else find_config_file()
    key = str(resolved.resolve()) if resolved is not None else None
    if use_cache and key in _cache:
        return _cache[key]
    if resolved is not None and not resolved.is_file():
        raise ConfigError(f"config file {resolved} does not exist")
    cfg = load_config_file(resolved)
    _cache[key] = cfg
    return cfg


# path -> ((mtime_ns, size, inode), the last good [stdlib] settings of that file)
_stdlib_seen: dict[str, tuple[tuple[int, int, int], StdlibConfig]] = {}


def current_stdlib_config() -> StdlibConfig:
    """The ``[stdlib]`` settings of the effective mail.toml, re-read when the file changes.

    The file's mtime, size and inode are compared on every call (one ``stat``); when they
    differ, the ``[stdlib]`` tables are parsed again, so a running server picks up edited
    guards and limits without a restart. An edit that does not parse or validate is logged
    and the last good settings stay in force. ``[server]`` keys are not re-read (restart).
    """
    path = find_config_file()
    if path is None:
        return StdlibConfig()
    key = str(path.resolve())
    try:
        st = path.stat()
    except OSError:
        seen = _stdlib_seen.get(key)
        return seen[1] if seen is not None else StdlibConfig()
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    seen = _stdlib_seen.get(key)
    if seen is not None and seen[0] == signature:
        return seen[1]
    try:
        stdlib = load_config_file(path).stdlib
    except ConfigError as exc:
        if seen is None:
            raise
        logger.error("%s (keeping the previous [stdlib] settings)", exc)
        _stdlib_seen[key] = (signature, seen[1])
        return seen[1]
    if seen is not None and seen[1] != stdlib:
        logger.info("[stdlib] settings re-read from %s", path)
    _stdlib_seen[key] = (signature, stdlib)
    return stdlib


def read_config_table(name: str) -> dict[str, Any]:
    """Return one top-level table of the effective file (``{}`` when absent or unreadable).

    For callers that need one table without validating it against the models.
    """
    path = find_config_file()
    if path is None:
        return {}
    try:
        data = _read_toml(path)
    except ConfigError as exc:
        logger.warning("%s", exc)
        return {}
    table = data.get(name, {})
    return table if isinstance(table, dict) else {}
