"""`mail db-copy FROM TO`: move a server's data between stores (SQLite -> PostgreSQL, ...)."""

from __future__ import annotations

import argparse
import sys

EPILOG = """\
examples:
  mail db-copy data/mail.db postgresql://user:password@localhost:5432/mail
  mail db-copy postgresql://localhost/mail sqlite:///srv/mail/mail.db

Stop the server first: a SQLite file a server is using is refused. The target's tables
are created when missing; a target that holds data is refused. The rows go in within one
transaction: if the copy is interrupted the target stays empty, and the same command can
be run again. Exit status 0 on success, 1 with one "Error: ..." line otherwise.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("source", metavar="FROM", help="SQLite file or PostgreSQL URL to read")
    parser.add_argument("target", metavar="TO", help="SQLite file or PostgreSQL URL to fill")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from mail.store.copy import copy_database, endpoint

    try:
        source, target = endpoint(args.source), endpoint(args.target)
    except ValueError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"Copying {source.name} -> {target.name}", flush=True)

    def progress(table: str, rows: int) -> None:
        print(f"  {table}: {rows} row(s)", flush=True)

    try:
        copied = asyncio.run(copy_database(args.source, args.target, progress))
    except Exception as exc:  # one line for any failure (unreachable, not empty, ...)
        print(f"Error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    total = sum(copied.values())
    tables = sum(1 for rows in copied.values() if rows)
    print(f"Done: {total} row(s) in {tables} table(s).", flush=True)
    return 0
