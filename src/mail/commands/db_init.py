"""`mail db-init`: create (or bring up to date) the tables used for persistence."""

from __future__ import annotations

import argparse
import sys


def add_database_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """--database-url and --sqlite, for a command that `verb`s the database."""
    parser.add_argument(
        "--database-url",
        default=None,
        help=f"PostgreSQL URL to {verb} (default: $DATABASE_URL, also read from ./.env)",
    )
    parser.add_argument(
        "--sqlite",
        metavar="PATH",
        default=None,
        help=f"SQLite file to {verb} (default: [server.store] path, data/mail.db)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser, "initialise")
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds to wait for the connection (default: 10)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from mail.store import database_url_from_env

    url = None if args.sqlite else args.database_url or database_url_from_env()
    if not url:
        return _init_sqlite(args.sqlite)
    return asyncio.run(_init(url, args.timeout))


def _init_sqlite(path_arg: str | None) -> int:
    from pathlib import Path

    from mail.config import ConfigError, load_config
    from mail.store.sqlite_schema import ProcessLock, applied_versions, connect, migrate

    if path_arg:
        path = Path(path_arg)
    else:
        try:
            server = load_config(use_cache=False).server
        except ConfigError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 1
        if server.store.kind != "sqlite":
            print(
                f'Error: [server.store] kind = "{server.store.kind}" and DATABASE_URL is not '
                "set: nothing to initialise. Set DATABASE_URL (PostgreSQL) or pass --sqlite PATH.",
                file=sys.stderr,
            )
            return 1
        path = server.store.database_path(server.swarm.registry_file)
    _say(f"SQLite database {path.resolve()} ...")
    try:
        with ProcessLock(path):  # a missing folder is made 0700, the file 0600
            conn = connect(path)
            try:
                applied = migrate(conn, lambda v: _say(f"Applying schema version {v} ..."))
                present = applied_versions(conn)
            finally:
                conn.close()
    except Exception as exc:
        print(f"Error: cannot initialise {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    state = f"{len(applied)} migration(s) applied" if applied else "already up to date"
    _say(f"Database initialization complete (schema version {max(present)}, {state}).")
    return 0


def _say(text: str = "") -> None:
    print(text, flush=True)


async def _init(url: str, timeout: float) -> int:
    import asyncpg

    from mail.store.postgres_schema import (
        ensure_schema,
        normalize_dsn,
        redact_dsn,
        verify_schema,
    )

    dsn = normalize_dsn(url)
    _say(f"Connecting to {redact_dsn(dsn)} ...")
    try:
        conn = await asyncpg.connect(dsn, timeout=timeout)
    except Exception as exc:  # any failure here is reported in one line
        print(
            f"Error: cannot connect to {redact_dsn(dsn)}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    _say("Connected.")

    def progress(table: str, state: str) -> None:
        if state == "creating":
            print(f"Setting up table {table} ...", end="", flush=True)
        else:
            _say(" created" if state == "created" else " already present")

    try:
        report = await ensure_schema(conn, progress)  # every store's tables
        if report.removed_duplicate_histories:
            _say(
                f"Collapsed {report.removed_duplicate_histories} duplicated agent history row(s) "
                "left by an older version (kept the newest per agent and task)."
            )
        if report.history_segments:
            _say("Upgraded agent_histories: histories are stored as appended segments.")
        if report.removed_pseudo_tasks:
            _say(
                f"Removed {report.removed_pseudo_tasks} pseudo-task row(s) (task_id '*') "
                "left by an older version."
            )
        _say("Indexes are in place.")
        _say()
        _say("Checking tables:")
        results = await verify_schema(conn)
    except Exception as exc:
        _say()
        print(
            f"Error: database initialisation failed: {type(exc).__name__}: {exc}", file=sys.stderr
        )
        return 1
    finally:
        await conn.close()

    for table in results:
        _say(f"  {table}: {'OK' if results[table] else 'MISSING'}")
    if not all(results.values()):
        print("Error: some tables are missing after initialisation.", file=sys.stderr)
        return 1
    _say()
    _say(
        f"Database initialization complete ({len(report.created)} table(s) created, "
        f"{len(report.existing)} already present)."
    )
    return 0
