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

# SQLite: one migration version (mail.store.sqlite_schema.MIGRATIONS). WITHOUT ROWID and no
# index on expires_at: a take (on the request path of every keyed request) then writes one
# b-tree page; the sweep of expired keys (every ten minutes, on the database thread) scans.
SQLITE_DDL: tuple[str, ...] = (
    f"CREATE TABLE {TABLE} ({_COLUMNS.format(blob='BLOB', real='REAL')}) WITHOUT ROWID",
)

# PostgreSQL: idempotent, run by the store when it starts (and by `mail db-copy`).
POSTGRES_DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} ({_COLUMNS.format(blob="BYTEA", real="DOUBLE PRECISION")});
CREATE INDEX IF NOT EXISTS {TABLE}_expiry ON {TABLE} (expires_at);
"""
