"""The `idempotency_keys` table, as both SQL stores create it (no imports: a leaf).

One row per (swarm, caller, key): the request's fingerprint, what it started (`subject`, a
task id for ``POST /message``, and `context`, JSON the route needs to find that work again),
and, once the request finished, its outcome (`status`, `content_type`, `body`). Times are
seconds since the epoch (the writing process's clock), so both databases compare them alike.
"""

from __future__ import annotations

TABLE = "idempotency_keys"

_COLUMNS = """
    swarm_name TEXT NOT NULL,
    caller_role TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    subject TEXT,
    context TEXT NOT NULL DEFAULT '{{}}',
    status INTEGER,
    content_type TEXT,
    body {blob},
    holder TEXT NOT NULL DEFAULT '',
    created_at {real} NOT NULL,
    expires_at {real} NOT NULL,
    PRIMARY KEY (swarm_name, caller_role, caller_id, idem_key)
"""

_SQLITE_COLUMNS = _COLUMNS.format(blob="BLOB", real="REAL")

# SQLite, migration 3 (mail.store.sqlite_schema.MIGRATIONS), as released: WITHOUT ROWID.
SQLITE_DDL: tuple[str, ...] = (f"CREATE TABLE {TABLE} ({_SQLITE_COLUMNS}) WITHOUT ROWID",)

# SQLite, migration 4: the same table as a rowid table (its primary key an index of its own),
# the keys it holds copied over. A WITHOUT ROWID row lives in the key's b-tree, and rows grow
# past that layout's sweet spot (about a twentieth of a page) once an outcome body is stored:
# in a file of 24,000 keys with 2 kB outcomes, a take cost 40 us and an outcome 28 us there,
# 11 us and 11 us here (100-byte outcomes: 9 + 14 us there, 11 + 4 us here), as rows
# appended in time order share pages, so a batch of outcomes writes few. No index on
# expires_at: the sweep of expired keys (every ten minutes, on the database thread) scans.
SQLITE_ROWID_DDL: tuple[str, ...] = (
    f"CREATE TABLE {TABLE}_rowid ({_SQLITE_COLUMNS})",
    f"INSERT INTO {TABLE}_rowid SELECT * FROM {TABLE}",
    f"DROP TABLE {TABLE}",
    f"ALTER TABLE {TABLE}_rowid RENAME TO {TABLE}",
)

# PostgreSQL: idempotent, run by the store when it starts (and by `mail db-copy`).
POSTGRES_DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} ({_COLUMNS.format(blob="BYTEA", real="DOUBLE PRECISION")});
CREATE INDEX IF NOT EXISTS {TABLE}_expiry ON {TABLE} (expires_at);
"""
