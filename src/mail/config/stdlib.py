"""``[stdlib]``: settings of the ready-made actions in ``mail.stdlib``."""

from __future__ import annotations

import os

from pydantic import Field, ValidationError

from mail.config.base import ConfigError, _Section

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
