"""Persistence for MAIL: one `TaskStore`, on an in-memory, SQLite or PostgreSQL database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mail.store.base import TaskStore
from mail.store.records import (
    InstanceKey,
    InstanceSnapshot,
    StoreUnavailableError,
    detect_tool_format,
)
from mail.store.sqlite import MemoryTaskStore

if TYPE_CHECKING:
    from mail.store.lifecycle import TaskLifecycle
    from mail.store.postgres import PostgresTaskStore

__all__ = [
    "InstanceKey",
    "InstanceSnapshot",
    "MemoryTaskStore",
    "PostgresTaskStore",
    "StoreUnavailableError",
    "TaskStore",
    "create_store",
    "database_enabled",
    "database_url_from_env",
    "detect_tool_format",
    "lifecycle_for",
    "load_dotenv",
    "server_store",
    "store_kind",
    "store_from_env",
]


# Values of DATABASE_URL that mean "no database".
_DISABLED = {"", "none", "null", "off", "false", "0", "memory"}


def load_dotenv(path: str | os.PathLike[str] = ".env", *, override: bool = False) -> dict[str, str]:
    """Read KEY=VALUE lines from a .env file into os.environ; returns what was read.

    Supports comments, blank lines, an optional `export ` prefix and single or double
    quotes. Variables already in the environment win unless `override` is true. A missing
    file is not an error.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return {}
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:  # an unquoted value may carry a trailing comment
            value = value.split(" #", 1)[0].rstrip()
        values[name] = value
        if override or name not in os.environ:
            os.environ[name] = value
    return values


def database_url_from_env(*, dotenv: bool = True) -> str | None:
    """DATABASE_URL after loading ./.env; None when unset or set to a 'disabled' value."""
    if dotenv:
        load_dotenv()
    url = os.environ.get("DATABASE_URL")
    return url.strip() if database_enabled(url) and url is not None else None


def database_enabled(database_url: str | None) -> bool:
    """Whether a DATABASE_URL value names a database (None, "", "none", ... do not)."""
    return database_url is not None and database_url.strip().lower() not in _DISABLED


def create_store(database_url: str | None, **options: Any) -> TaskStore:
    """A PostgreSQL store for a database URL; the in-memory store for None, "" or "none".

    `options` go to the PostgreSQL store (pool sizes, timeouts, batching; see its
    constructor) and are ignored for the in-memory store.
    """
    if not database_enabled(database_url):
        return MemoryTaskStore()
    assert database_url is not None
    from mail.store.postgres import PostgresTaskStore

    return PostgresTaskStore(database_url.strip(), **options)


def store_from_env(**options: Any) -> TaskStore:
    """`create_store` with DATABASE_URL (read after loading ./.env)."""
    return create_store(database_url_from_env(), **options)


def store_kind(kind: str, database_url: str | None) -> str:
    """The store a server uses: "memory" | "sqlite" | "postgres".

    `kind` is [server.store] kind (or `--store`). "memory" always wins; otherwise a
    DATABASE_URL selects PostgreSQL, and "postgres" without one is an error.
    """
    if kind == "memory":
        return "memory"
    if database_enabled(database_url):
        return "postgres"
    if kind == "postgres":
        raise StoreUnavailableError(
            '[server.store] kind = "postgres" needs DATABASE_URL (in the environment or ./.env)'
        )
    return "sqlite"


def server_store(
    kind: str, sqlite_path: str | Path, database_url: str | None, **options: Any
) -> TaskStore | None:
    """The (not yet started) task store of a server; None for "memory" (the runtime keeps
    its tasks itself). `options` go to the PostgreSQL store; `max_pending` (the writes held
    while the database does not take them) to either SQL store."""
    chosen = store_kind(kind, database_url)
    if chosen == "memory":
        return None
    if chosen == "postgres":
        return create_store(database_url, **options)
    from mail.store.sqlite import SqliteTaskStore

    if "max_pending" in options:
        return SqliteTaskStore(sqlite_path, max_pending=options["max_pending"])
    return SqliteTaskStore(sqlite_path)


def lifecycle_for(store: Any) -> TaskLifecycle | None:
    """How the server reads, measures and removes a store's finished tasks
    (`mail.store.lifecycle`); None for a store object this package does not know."""
    if getattr(store, "backend", None) not in ("sqlite", "memory", "postgres"):
        return None
    from mail.store.lifecycle import TaskLifecycle

    return TaskLifecycle(store)


def __getattr__(name: str) -> Any:
    # Lazy, so `import mail.store` does not import asyncpg.
    if name == "PostgresTaskStore":
        from mail.store.postgres import PostgresTaskStore

        return PostgresTaskStore
    raise AttributeError(f"module 'mail.store' has no attribute {name!r}")
