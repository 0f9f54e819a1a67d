"""Settings of the client side: the `[client]` table of mail.toml."""

from __future__ import annotations

import logging
import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

logger = logging.getLogger("mail.config")

CONFIG_ENV_VAR = "MAIL_CONFIG_PATH"
CONFIG_FILE_NAME = "mail.toml"


class ClientConfig(BaseModel):
    """Options of `MAILClient` and `mail client`.

    `timeout` is the total number of seconds one HTTP request (a whole SSE stream included)
    may take; `verbose` makes the client log every request and response at INFO level.
    `retries` is how many times a call that starts work (it carries an `Idempotency-Key`) is
    sent again after a transient failure (a connection reset or refused, a timeout before the
    answer, 502/503/504, 429 with `Retry-After`), waiting `retry_backoff` seconds doubled at
    each attempt (at most `retry_max_delay`, with jitter) or what `Retry-After` says.
    """

    model_config = ConfigDict(extra="ignore")

    timeout: float = Field(default=3600.0, gt=0)
    verbose: bool = False
    retries: int = Field(default=3, ge=0, le=100)
    retry_backoff: float = Field(default=0.5, ge=0)
    retry_max_delay: float = Field(default=30.0, ge=0)

    @field_validator("retries", mode="before")
    @classmethod
    def _retries_not_a_bool(cls, value: Any) -> Any:
        # pydantic takes True for 1; `MAILClient(retries=True)` refuses it, and so does this.
        if isinstance(value, bool):
            raise ValueError(retries_problem(value))
        return value

    def __init__(self, **settings: Any) -> None:
        # As in v1.3 (client.md: "ClientConfig pulls its defaults from the [client] table"),
        # a ClientConfig built in code takes what it is not given from the mail.toml that
        # applies, so `ClientConfig(verbose=True)` keeps the file's timeout. Reading a file's
        # table (`plain_client_config`) validates only what the table says.
        if not _PLAIN.get():
            settings = {**_client_table_settings(), **settings}
        super().__init__(**settings)


def retries_problem(value: object) -> str:
    """What is wrong with a `retries` that is not a whole number from 0 to 100 (a bool
    included), in the words of both `ClientConfig` and `MAILClient(retries=...)`."""
    return f"retries must be a whole number from 0 to 100, got {value!r}"


# Set while a [client] table itself is validated (pydantic's validation runs __init__ too).
_PLAIN: ContextVar[bool] = ContextVar("mail_client_config_plain", default=False)


def plain_client_config(table: dict[str, Any]) -> ClientConfig:
    """`table`'s settings over the built-in defaults (no mail.toml is read)."""
    token = _PLAIN.set(True)
    try:
        return ClientConfig.model_validate(table)
    finally:
        _PLAIN.reset(token)


def _client_table_settings() -> dict[str, Any]:
    """The valid settings of the `[client]` table of the mail.toml that applies ({} if none)."""
    path = find_config_file()
    if path is None:
        return {}
    try:
        table = _read_toml(path).get("client", {})
        if not isinstance(table, dict):
            raise ValueError(f"[client] in {path} must be a table")
        parsed = plain_client_config(table)
    except (ValueError, ValidationError) as exc:
        logger.warning("ignoring the [client] settings of %s: %s", path, exc)
        return {}
    return {name: getattr(parsed, name) for name in parsed.model_fields_set}


def find_config_path(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Return the mail.toml to read, or None when there is none.

    An explicit path must exist. Otherwise the search is the server's (`mail.config`):
    `$MAIL_CONFIG_PATH` when it names an existing file, then `./mail.toml`, then the nearest
    mail.toml above the installed package (the repository root in a checkout).
    """
    if path is not None:
        explicit = Path(path).expanduser()
        if not explicit.is_file():
            raise ValueError(f"configuration file not found: {explicit}")
        return explicit
    return find_config_file()


def find_config_file() -> Path | None:
    """Locate ``mail.toml`` (search order: see :func:`find_config_path`)."""
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


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"invalid TOML in {path}: {exc}") from exc
    except OSError as exc:
        raise ValueError(f"cannot read configuration file {path}: {exc}") from exc


def load_client_config(path: str | os.PathLike[str] | None = None) -> ClientConfig:
    """Build a `ClientConfig` from the `[client]` table of the mail.toml that applies.

    Missing file or missing table → the defaults. A malformed file or a bad value raises
    ValueError naming the file and the offending key.
    """
    config_path = find_config_path(path)
    if config_path is None:
        return ClientConfig()
    table = _read_toml(config_path).get("client", {})
    if not isinstance(table, dict):
        raise ValueError(f"[client] in {config_path} must be a table")
    try:
        return plain_client_config(table)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ValueError(f"invalid [client] settings in {config_path}: {problems}") from exc
