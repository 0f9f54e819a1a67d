"""Finding, reading and caching mail.toml: ``load_config`` and friends."""

from __future__ import annotations

import difflib
import logging
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from mail.client_config import ClientConfig, find_config_file
from mail.config.base import ConfigError, _Section
from mail.config.server import ServerConfig
from mail.config.stdlib import StdlibConfig

logger = logging.getLogger("mail.config")


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


def _known_tables() -> dict[str, type[BaseModel]]:
    """Each table of mail.toml -> the model that reads it (its sub-tables: its fields that
    are models of their own)."""
    tables: dict[str, type[BaseModel]] = {
        "server": ServerConfig,
        "client": ClientConfig,
        "stdlib": StdlibConfig,
    }
    for parent in ("server", "stdlib"):
        for name, field in tables[parent].model_fields.items():
            model = field.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                tables[f"{parent}.{name}"] = model
    return tables


def unknown_key_warnings(data: dict[str, Any], path: Path) -> list[str]:
    """One line per key no setting reads, with the one table that has it, else the closest
    known name, when there is one."""
    tables = _known_tables()
    found: list[str] = []
    homes: dict[str, list[str]] = {}
    for table, model in tables.items():
        for key in model.model_fields:
            homes.setdefault(key, []).append(table)

    def check(table: str, keys: list[str], known: set[str]) -> None:
        for key in keys:
            if key in known:
                continue
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            if len(homes.get(key, ())) == 1:
                hint = f"; it is a key of [{homes[key][0]}]"
            where = f"[{table}]" if table else "the top level"
            found.append(f"{path}: unknown key '{key}' in {where} is ignored{hint}")

    check("", list(data), {name for name in tables if "." not in name})
    for table, model in tables.items():
        parent, _, child = table.partition(".")
        section = data.get(parent)
        if child:
            section = section.get(child) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            continue
        sub_tables = {t.partition(".")[2] for t in tables if t.startswith(f"{table}.")}
        aliases = {f.alias for f in model.model_fields.values() if f.alias}
        check(table, list(section), set(model.model_fields) | aliases | sub_tables)
    return found


def _relative_to_file(source: str, config_path: Path) -> str:
    """``[server.swarm].source`` as read from ``config_path``: a relative path is relative to
    that file's folder (a relative path that exists only under the current folder is still
    found there), whoever reads the file (`mail server`, ``mail.server:app`` under uvicorn)."""
    path = Path(source).expanduser()
    if path.is_absolute():
        return str(path)
    beside_config = config_path.resolve().parent / path
    if beside_config.is_file() or not path.is_file():
        return str(beside_config)
    return source


def load_config_file(path: str | Path | None) -> MAILConfig:
    """Parse one file (or the defaults when ``path`` is None) into a :class:`MAILConfig`."""
    if path is None:
        return MAILConfig()
    path = Path(path)
    data = _read_toml(path)
    for table in _known_tables():
        parent, _, child = table.partition(".")
        section = data.get(parent, {})
        if child and isinstance(section, dict):
            section = section.get(child, {})
        if not isinstance(section, dict):
            raise ConfigError(f"config file {path}: [{table}] must be a table")
    server, client, stdlib = (data.get(name, {}) for name in ("server", "client", "stdlib"))
    try:
        stdlib_config = StdlibConfig.model_validate(stdlib)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in ("stdlib", *err.get("loc", ())))
        raise ConfigError(f"invalid config value in {path}: {where}: {err.get('msg')}") from exc
    try:
        server_config = ServerConfig.model_validate(server)
    except ValidationError as exc:
        raise _first_error(exc, path) from exc
    swarm = server_config.swarm
    swarm.source = _relative_to_file(swarm.source, path)
    try:
        return MAILConfig(
            server=server_config,
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
