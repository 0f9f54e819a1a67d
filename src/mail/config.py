"""Typed configuration read from ``mail.toml``.

The file is found by trying, in order: ``$MAIL_CONFIG_PATH`` (when it names an existing file),
``./mail.toml``, then the nearest ``mail.toml`` in a directory above the installed package (which
is the repository root in a checkout). A missing file, table or key falls back to the defaults
declared on the models below, so ``ServerConfig()`` and ``ClientConfig()`` always work.

Unlike the original, ``[server.settings]`` is read whether or not ``[server.swarm]`` is present,
and unknown keys are ignored (with a debug log) rather than rejected, so a config written for a
newer version still loads.
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

logger = logging.getLogger("mail.config")

CONFIG_ENV_VAR = "MAIL_CONFIG_PATH"
CONFIG_FILE_NAME = "mail.toml"

__all__ = [
    "AuthConfig",
    "ConfigError",
    "MAILConfig",
    "ServerConfig",
    "ServerSettings",
    "SwarmConfig",
    "clear_config_cache",
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

    @property
    def registry(self) -> str:
        return self.registry_file


class ServerSettings(_Section):
    """``[server.settings]``: runtime behaviour of the hosted swarm."""

    # Maximum number of counted messages per task before the runtime forces task_complete.
    # ``None`` (or 0 in the file) means unlimited.
    task_message_limit: int | None = 15
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
    # Largest request body, in bytes, any route accepts (413 above it; 0 = no limit).
    max_request_body: int = Field(default=4 * 1024 * 1024, ge=0)
    # Largest message body, in characters, a caller or an agent may send (0 = no limit).
    max_message_body: int = Field(default=1024 * 1024, ge=0)

    @field_validator("task_message_limit", mode="before")
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


class ServerConfig(_Section):
    """``[server]`` and its sub-tables."""

    port: int = Field(default=8000, ge=0, le=65535)
    host: str = "0.0.0.0"
    reload: bool = False
    debug: bool = False
    # One log line per request (uvicorn's access log).
    access_log: bool = True
    log_level: str = "info"
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    settings: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthConfig = Field(default_factory=AuthConfig)

    @property
    def base_url(self) -> str:
        """The URL other parties should use to reach this server (wildcard hosts → localhost)."""
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


class MAILConfig(_Section):
    """The whole file."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    client: dict[str, Any] = Field(default_factory=dict)
    # Path the values were read from (None when only defaults are in use).
    source_path: str | None = None


def find_config_file() -> Path | None:
    """Locate ``mail.toml`` (see the module docstring for the search order)."""
    env = os.environ.get(CONFIG_ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if path.is_file():
            return path
        logger.warning(
            "%s=%s does not name a file; falling back to the search path", CONFIG_ENV_VAR, env
        )
    local = Path.cwd() / CONFIG_FILE_NAME
    if local.is_file():
        return local
    for parent in Path(__file__).resolve().parents:
        candidate = parent / CONFIG_FILE_NAME
        if candidate.is_file():
            return candidate
    return None


_cache: dict[str | None, MAILConfig] = {}


def clear_config_cache() -> None:
    _cache.clear()


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


def load_config_file(path: str | Path | None) -> MAILConfig:
    """Parse one file (or the defaults when ``path`` is None) into a :class:`MAILConfig`."""
    if path is None:
        return MAILConfig()
    path = Path(path)
    data = _read_toml(path)
    server = data.get("server", {})
    if not isinstance(server, dict):
        raise ConfigError(f"config file {path}: [server] must be a table")
    for table in ("swarm", "settings", "auth"):
        if table in server and not isinstance(server[table], dict):
            raise ConfigError(f"config file {path}: [server.{table}] must be a table")
    client = data.get("client", {})
    if not isinstance(client, dict):
        raise ConfigError(f"config file {path}: [client] must be a table")
    try:
        return MAILConfig(
            server=ServerConfig.model_validate(server), client=client, source_path=str(path)
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


def read_config_table(name: str) -> dict[str, Any]:
    """Return one top-level table of the effective file (``{}`` when absent or unreadable).

    Used by ``mail.client_config.ClientConfig`` to read ``[client]`` without importing the
    server models.
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


def __getattr__(name: str) -> Any:
    # ClientConfig is defined by the client package; resolved lazily to avoid an import cycle
    # (mail.client_config reads [client] through read_config_table above).
    if name == "ClientConfig":
        from mail.client_config import ClientConfig

        return ClientConfig
    raise AttributeError(f"module 'mail.config' has no attribute {name!r}")
