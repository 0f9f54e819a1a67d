"""Space in the SQLite file: incremental auto-vacuum, giving freed pages back, and reports."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("mail.store.sqlite")

INCREMENTAL = 2  # PRAGMA auto_vacuum values: 0 NONE, 1 FULL, 2 INCREMENTAL
MODES = {0: "none", 1: "full", 2: "incremental"}
# Larger files are converted by `mail db-prune` (a full VACUUM takes a while and needs
# about the file's size again in free disk space), smaller ones when the store opens them.
AUTO_CONVERT_BYTES = 64 * 1024 * 1024
VACUUM_STEP_PAGES = 2048  # pages per incremental_vacuum step (8 MiB with 4 KiB pages)
WAL_SIZE_LIMIT = 64 * 1024 * 1024  # the WAL is cut back to this after each checkpoint


@dataclass
class SpaceReport:
    """How big the store's file is and how much of it is free (SQLite; zeros elsewhere)."""

    file_bytes: int = 0
    free_bytes: int = 0
    auto_vacuum: str = ""


def prepare_connection(conn: sqlite3.Connection) -> None:
    """Before anything else on a new connection: a new file gets incremental auto-vacuum (the
    mode can only be chosen before the first table), and the WAL file is kept small."""
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")


def auto_vacuum_mode(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])


def file_bytes(conn: sqlite3.Connection) -> int:
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return page_size * int(conn.execute("PRAGMA page_count").fetchone()[0])


def convert_auto_vacuum(conn: sqlite3.Connection, max_bytes: int | None = None) -> bool:
    """Switch a file to incremental auto-vacuum with a full VACUUM (None: any size).

    Returns whether it was converted; a file already in that mode, or larger than
    `max_bytes`, is left as it is.
    """
    if auto_vacuum_mode(conn) == INCREMENTAL:
        return False
    size = file_bytes(conn)
    if max_bytes is not None and size > max_bytes:
        return False
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return auto_vacuum_mode(conn) == INCREMENTAL


def convert_on_open(conn: sqlite3.Connection, path: Path) -> None:
    """At start-up: convert a small file made by an older version; say what to do otherwise."""
    if auto_vacuum_mode(conn) == INCREMENTAL:
        return
    if convert_auto_vacuum(conn, AUTO_CONVERT_BYTES):
        logger.info(
            "%s now returns freed space to the file system (auto_vacuum = incremental)", path
        )
        return
    logger.warning(
        "%s was made by an older version of mail and does not shrink when tasks are removed; "
        "stop the server and run `mail db-prune --vacuum` once to switch it (it rewrites the "
        "file: it needs about its size in free disk space)",
        path,
    )


def vacuum_step(conn: sqlite3.Connection, pages: int = VACUUM_STEP_PAGES) -> int:
    """Give up to `pages` free pages back to the file system; returns the free pages left.
    Nothing (0) without incremental auto-vacuum: the free pages stay for later writes."""
    if auto_vacuum_mode(conn) != INCREMENTAL:
        return 0
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    if free:
        # executescript runs the pragma to its end; execute() would free one page per call.
        conn.executescript(f"PRAGMA incremental_vacuum({min(free, pages)})")
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return free


def truncate_wal(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the database file and cut it to nothing (the file shrinks only once
    the pages a vacuum moved are checkpointed)."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def space_report(conn: sqlite3.Connection) -> SpaceReport:
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return SpaceReport(
        file_bytes=file_bytes(conn),
        free_bytes=free * page_size,
        auto_vacuum=MODES.get(auto_vacuum_mode(conn), "?"),
    )


def on_disk_bytes(path: Path) -> int:
    """The database file and its WAL, as the file system counts them."""
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(f"{path}{suffix}").st_size
    return total
