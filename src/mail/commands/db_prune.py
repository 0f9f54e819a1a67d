"""`mail db-prune`: remove expired finished tasks by hand, and give the space back."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mail.commands.db_init import _say, add_database_arguments

EPILOG = """\
examples:
  mail db-prune                      # [server.store] finished_task_ttl of ./mail.toml
  mail db-prune --older-than 7d      # tasks finished more than a week ago
  mail db-prune --older-than 0 --vacuum

Stop the server first: a SQLite file a server is using is refused (the server prunes it
itself). Exit status 0 on success, 1 with one "Error: ..." line otherwise.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--older-than",
        metavar="DURATION",
        default=None,
        help="remove tasks finished longer ago than this: seconds, or 30d, 12h, 90m "
        "(default: [server.store] finished_task_ttl; 0 removes every finished task)",
    )
    add_database_arguments(parser, "prune")
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="then rewrite the file (SQLite VACUUM; a plain VACUUM ANALYZE on PostgreSQL)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from mail.config import ConfigError, load_config, parse_duration
    from mail.store import database_url_from_env

    try:
        server = load_config(use_cache=False).server
    except ConfigError as exc:  # (the config names the store and the default TTL)
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        ttl = (
            server.store.finished_task_ttl
            if args.older_than is None
            else parse_duration(args.older_than)
        )
    except ValueError as exc:
        print(f"Error: --older-than: {exc}", file=sys.stderr)
        return 1
    longest = _longest_ttl()
    if ttl > longest:
        # The cutoff would fall before the calendar's first day (it printed as year "1").
        if args.older_than is None:  # the server's own TTL: it keeps every task
            print(
                f"[server.store] finished_task_ttl = {ttl:g} reaches back before the year 1: "
                "no task is that old, nothing to remove.",
                flush=True,
            )
            return 0
        print(
            f"Error: --older-than: '{args.older_than}' reaches back before the year 1; the "
            f"longest is {int(longest) // 86400}d",
            file=sys.stderr,
        )
        return 1
    if args.older_than is None and ttl == 0:
        print(
            "[server.store] finished_task_ttl = 0 keeps every task: nothing to remove "
            "(pass --older-than to remove finished tasks anyway).",
            flush=True,
        )
        return 0
    if args.sqlite and args.database_url:
        print("Error: give --sqlite PATH or --database-url URL, not both", file=sys.stderr)
        return 1
    kind = server.store.kind
    if not (args.sqlite or args.database_url) and kind == "memory":
        # As for the server: the memory store ignores DATABASE_URL (it may name another
        # deployment's database).
        print(
            '[server.store] kind = "memory" keeps nothing on disk: nothing to prune '
            "(pass --sqlite PATH or --database-url URL).",
            flush=True,
        )
        return 0
    url = None if args.sqlite else args.database_url or database_url_from_env()
    if not (url or args.sqlite) and kind == "postgres":
        print(
            'Error: [server.store] kind = "postgres" needs DATABASE_URL (in the environment '
            "or ./.env), or pass --database-url URL",
            file=sys.stderr,
        )
        return 1
    try:
        if url:
            return asyncio.run(_prune_postgres(url, ttl, args.vacuum))
        from pathlib import Path

        path = (
            Path(args.sqlite)
            if args.sqlite
            else server.store.database_path(server.swarm.registry_file)
        )
        if path.is_dir():
            print(f"Error: {path} is a folder, not a SQLite file", file=sys.stderr)
            return 1
        if not path.exists():
            _say(f"Pruning SQLite {path}: {_headline(ttl)[1]}")
            _say(f"Nothing to remove: {path} does not exist (yet).")
            return 0
        return asyncio.run(_prune_sqlite(path, ttl, args.vacuum))
    except Exception as exc:  # one line for any failure (in use, unreachable, ...)
        print(f"Error: {_in_use(exc) or exc}", file=sys.stderr)
        return 1


def _longest_ttl() -> float:
    """Seconds from the calendar's first day (1 January of the year 1) to now."""
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    return (now - dt.datetime.min.replace(tzinfo=dt.UTC)).total_seconds()


def _in_use(exc: BaseException) -> str | None:
    """The line for a SQLite file a running server holds (its own words are for a server)."""
    from mail.store.sqlite_schema import DatabaseInUseError

    cause = exc.__cause__ if not isinstance(exc, DatabaseInUseError) else exc
    if not isinstance(cause, DatabaseInUseError):
        return None
    return (
        f"the SQLite file is in use by a running mail server (pid {cause.holder}): stop it "
        "first (a running server prunes its file itself, every [server.store] prune_interval)"
    )


def _say_removed(report: Any, team_rows: int) -> None:
    """What was removed; the files the removed tasks wrote under [stdlib.fs] go now."""
    from mail.core.file_root import remove_task_files

    files = remove_task_files(report.files)
    _say(
        f"Removed {len(report.tasks)} task(s) ({report.rows} rows) in "
        f"{report.batches} batch(es), {team_rows} team row(s), {files} file(s)."
    )


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def _headline(ttl: float) -> tuple[Any, str]:
    from mail.store.lifecycle import cutoff_for

    cutoff = cutoff_for(ttl)
    if ttl == 0:
        return cutoff, "every finished task"
    when = f"{cutoff.year:04d}-{cutoff:%m-%d %H:%M:%S} UTC"  # (%Y has no leading zeros)
    return cutoff, f"tasks finished before {when} (more than {_duration(ttl)} ago)"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


async def _prune_sqlite(path: Any, ttl: float, vacuum: bool) -> int:
    import logging

    # The store's own start-up hint names this command: not worth repeating here (the level
    # is put back, for a caller that runs the command in its own process).
    quiet = logging.getLogger("mail.store.sqlite")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return await _prune_sqlite_file(path, ttl, vacuum)
    finally:
        quiet.setLevel(level)


async def _prune_sqlite_file(path: Any, ttl: float, vacuum: bool) -> int:
    from mail.store import lifecycle_for
    from mail.store.sqlite import SqliteTaskStore
    from mail.store.sqlite_space import convert_auto_vacuum, on_disk_bytes, truncate_wal
    from mail.store.team_base import SqliteTeamStore

    cutoff, what = _headline(ttl)
    before = on_disk_bytes(path)
    store = SqliteTaskStore(path)
    team = SqliteTeamStore(path)
    await store.start()  # refuses a file a server uses: then no headline before the error
    _say(f"Pruning SQLite {path}: {what}")
    try:
        await team.start()
        lifecycle = lifecycle_for(store)
        assert lifecycle is not None
        report = await lifecycle.prune(cutoff)
        team_rows = await team.prune_before(cutoff)
        _say_removed(report, team_rows)
        await lifecycle.reclaim_space()
        if vacuum:
            await store.db.run(_full_vacuum, convert_auto_vacuum, truncate_wal)
        space = await lifecycle.space()
    finally:
        await team.close()
        await store.close()
    after = on_disk_bytes(path)
    _say(
        f"{path}: {_mib(before)} -> {_mib(after)} "
        f"({_mib(max(0, before - after))} returned to the file system)."
    )
    if space.auto_vacuum != "incremental":
        _say(
            "This file was made by an older version of mail and keeps freed space for new "
            "rows; run `mail db-prune --vacuum` once to make it shrink by itself."
        )
    return 0


def _full_vacuum(conn: Any, convert: Any, truncate: Any) -> None:
    if not convert(conn):  # converted: that was a VACUUM already
        conn.execute("VACUUM")
    truncate(conn)


async def _prune_postgres(url: str, ttl: float, vacuum: bool) -> int:
    from mail.store import lifecycle_for
    from mail.store.postgres import PostgresTaskStore
    from mail.store.postgres_schema import redact_dsn
    from mail.store.schema import TEAM_TABLES
    from mail.store.team_base import PostgresTeamStore

    cutoff, what = _headline(ttl)
    _say(f"Pruning PostgreSQL {redact_dsn(url)}: {what}")
    store = PostgresTaskStore(url, min_size=1, max_size=2)
    await store.start()
    try:
        lifecycle = lifecycle_for(store)
        assert lifecycle is not None
        report = await lifecycle.prune(cutoff)
        team_rows = 0
        pool: Any = store._pool
        if await pool.fetchval("SELECT to_regclass('team_threads') IS NOT NULL"):
            team = PostgresTeamStore(url, min_size=1, max_size=1)
            await team.start()
            try:
                team_rows = await team.prune_before(cutoff)
            finally:
                await team.close()
        _say_removed(report, team_rows)
        if vacuum:
            from mail.store.lifecycle import TASK_TABLES

            rows = await pool.fetch(
                "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname = ANY($1::text[])"
                " AND pg_table_is_visible(oid)",
                [*TASK_TABLES, *(t.name for t in TEAM_TABLES)],
            )
            for row in rows:
                await pool.execute(f"VACUUM (ANALYZE) {row['relname']}")
            _say(f"Vacuumed {len(rows)} table(s): the space is reusable by new rows.")
    finally:
        await store.close()
    return 0
