"""Typed configuration read from ``mail.toml`` (the package re-exports every name)."""

from __future__ import annotations

# The file search and the [client] model live below this package (the client reads them
# without the server models); re-exported here, where callers have always found them.
from mail.client_config import CONFIG_ENV_VAR, CONFIG_FILE_NAME, ClientConfig, find_config_file
from mail.config.base import ConfigError
from mail.config.loading import (
    MAILConfig,
    clear_config_cache,
    current_stdlib_config,
    load_config,
    load_config_file,
    read_config_table,
    unknown_key_warnings,
)
from mail.config.server import (
    CLUSTER_ENV,
    AuthConfig,
    ClusterConfig,
    McpConfig,
    ServerConfig,
    ServerSettings,
    SettingsConfig,
    StoreConfig,
    SwarmConfig,
    TeamToolsConfig,
    apply_cluster_env,
    cluster_enabled,
    parse_duration,
)
from mail.config.stdlib import (
    STDLIB_ENV_PREFIX,
    StdlibConfig,
    StdlibFsConfig,
    StdlibHttpConfig,
    StdlibMcpConfig,
    StdlibNetConfig,
)

__all__ = [
    "CLUSTER_ENV",
    "CONFIG_ENV_VAR",
    "CONFIG_FILE_NAME",
    "STDLIB_ENV_PREFIX",
    "AuthConfig",
    "ClientConfig",
    "ClusterConfig",
    "ConfigError",
    "MAILConfig",
    "McpConfig",
    "ServerConfig",
    "ServerSettings",
    "SettingsConfig",
    "StdlibConfig",
    "StdlibFsConfig",
    "StdlibHttpConfig",
    "StdlibMcpConfig",
    "StdlibNetConfig",
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
    "parse_duration",
    "read_config_table",
    "unknown_key_warnings",
]
