"""Layouts of the SQLite idempotency key table, written as the server writes it (not a test).

    uv run python bench/key_table_layouts.py [--keys 40000] [--batches 500] [--rounds 2]

For each layout: a file in the server's mode (WAL, synchronous=NORMAL, no automatic
checkpoint) holding `--keys` keys of 4 callers, then `--batches` transactions of 16 new keys
(random UUIDs, as clients send them), each an upsert of the whole row as
`KEY_ROW_SQL`, with a passive checkpoint every 60 batches (about the server's pace, see
`CHECKPOINT_PAGES`). Printed per key: CPU microseconds of the statements and commits, of the
checkpoints, and WAL frames written. The random keys land in different leaves of whatever
index they are looked up by; the layouts differ in how large that index is and what else
each insert touches. `rowid_pk` is the table of migration 4 (the server's), `without_rowid`
the one of migration 3.
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

COLUMNS = """swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, caller_id TEXT NOT NULL,
    idem_key TEXT NOT NULL, fingerprint TEXT NOT NULL, subject TEXT,
    context TEXT NOT NULL DEFAULT '{}', status INTEGER, content_type TEXT, body BLOB,
    holder TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, expires_at REAL NOT NULL"""
PK = "PRIMARY KEY (swarm_name, caller_role, caller_id, idem_key)"
SCOPE_INDEX = "CREATE INDEX k_scope ON k (swarm_name, caller_role, caller_id, created_at)"
UPDATE = "DO UPDATE SET status = excluded.status, body = excluded.body"
VALUES_13 = ", ".join("?" * 13)

# name -> (DDL, upsert, how the key is hashed into an extra column: None, "blob" or "int")
LAYOUTS: dict[str, tuple[list[str], str, str | None]] = {
    "rowid_pk": (
        [f"CREATE TABLE k ({COLUMNS}, {PK})"],
        f"INSERT INTO k VALUES ({VALUES_13}) ON CONFLICT "
        f"(swarm_name, caller_role, caller_id, idem_key) {UPDATE}",
        None,
    ),
    "without_rowid": (
        [f"CREATE TABLE k ({COLUMNS}, {PK}) WITHOUT ROWID"],
        f"INSERT INTO k VALUES ({VALUES_13}) ON CONFLICT "
        f"(swarm_name, caller_role, caller_id, idem_key) {UPDATE}",
        None,
    ),
    "hash16+scope_index": (
        [
            f"CREATE TABLE k ({COLUMNS}, key_hash BLOB NOT NULL)",
            "CREATE UNIQUE INDEX k_hash ON k (key_hash)",
            SCOPE_INDEX,
        ],
        f"INSERT INTO k VALUES ({VALUES_13}, ?) ON CONFLICT (key_hash) {UPDATE}",
        "blob",
    ),
    "hash8+scope_index": (
        [
            f"CREATE TABLE k ({COLUMNS}, key_hash INTEGER NOT NULL)",
            "CREATE UNIQUE INDEX k_hash ON k (key_hash)",
            SCOPE_INDEX,
        ],
        f"INSERT INTO k VALUES ({VALUES_13}, ?) ON CONFLICT (key_hash) {UPDATE}",
        "int",
    ),
    "hash16_only (per-caller reads scan)": (
        [
            f"CREATE TABLE k ({COLUMNS}, key_hash BLOB NOT NULL)",
            "CREATE UNIQUE INDEX k_hash ON k (key_hash)",
        ],
        f"INSERT INTO k VALUES ({VALUES_13}, ?) ON CONFLICT (key_hash) {UPDATE}",
        "blob",
    ),
}


def key_row(n: int, hashed: str | None) -> tuple[Any, ...]:
    now = time.time()
    row: tuple[Any, ...] = (
        "bench", "user", f"bench-{n % 4}", str(uuid.uuid4()), "f" * 64, str(uuid.uuid4()),
        '{"after":0,"answer":null,"stream":false}', None, None, None, "host:1", now,
        now + 86400.0,
    )  # fmt: skip
    if hashed is None:
        return row
    digest = hashlib.blake2b("\0".join(row[:4]).encode(), digest_size=16).digest()
    if hashed == "int":
        return (*row, int.from_bytes(digest[:8], "big", signed=True))
    return (*row, digest)


def measure(path: Path, layout: str, keys: int, batches: int) -> tuple[float, float, float]:
    ddl, upsert, hashed = LAYOUTS[layout]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        for statement in ddl:
            conn.execute(statement)
        conn.execute("BEGIN")
        conn.executemany(upsert, [key_row(n, hashed) for n in range(keys)])
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = [key_row(n, hashed) for n in range(16 * batches)]
        written = checkpointed = 0.0
        frames = 0
        for batch in range(batches):
            start = time.thread_time()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(upsert, rows[16 * batch : 16 * batch + 16])
            conn.execute("COMMIT")
            written += time.thread_time() - start
            if batch % 60 == 59:
                start = time.thread_time()
                frames += conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
                checkpointed += time.thread_time() - start
    finally:
        conn.close()
    count = len(rows)
    return 1e6 * written / count, 1e6 * checkpointed / count, frames / count


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--keys", type=int, default=40_000, help="keys in the file first")
    parser.add_argument("--batches", type=int, default=500, help="transactions of 16 keys")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over every layout")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in LAYOUTS}
    with tempfile.TemporaryDirectory(prefix="mail-key-layouts-") as tmp:
        for round_ in range(args.rounds):
            for name in LAYOUTS:
                path = Path(tmp) / f"{round_}-{len(results[name])}-{abs(hash(name))}.db"
                results[name].append(measure(path, name, args.keys, args.batches))
    print(
        f"Key table layouts ({args.keys} keys first, {args.batches} transactions of 16 new "
        f"keys, medians of {args.rounds} rounds), CPU per key:"
    )
    for name, got in results.items():
        write = statistics.median(w for w, _, _ in got)
        check = statistics.median(c for _, c, _ in got)
        frames = statistics.median(f for _, _, f in got)
        print(
            f"  {name:38s} statements+commit {write:5.1f} us  checkpoint {check:4.1f} us  "
            f"WAL frames {frames:4.2f}"
        )


if __name__ == "__main__":
    main()
