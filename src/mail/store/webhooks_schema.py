"""Tables of push delivery (webhooks, A2A push notifications), for SQLite and PostgreSQL."""

from __future__ import annotations

import re

TABLES: tuple[str, ...] = (
    "webhook_subscriptions",
    "webhook_events",
    "webhook_deliveries",
    "webhook_attempts",
)

_SUBSCRIPTIONS = """CREATE TABLE {exists}webhook_subscriptions (
    subscription_id TEXT PRIMARY KEY,
    swarm_name TEXT NOT NULL,
    owner_role TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    scope TEXT NOT NULL DEFAULT 'own',
    task_id TEXT,
    url TEXT NOT NULL,
    destination TEXT NOT NULL,
    events TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    active {bool} NOT NULL DEFAULT {true},
    disabled_reason TEXT,
    secret TEXT,
    previous_secret TEXT,
    previous_secret_until {real},
    push_token TEXT,
    push_auth TEXT,
    failing_since {real},
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    expires_at {real}
)"""

_EVENTS = """CREATE TABLE {exists}webhook_events (
    event_id TEXT PRIMARY KEY,
    swarm_name TEXT NOT NULL,
    caller_role TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at {real} NOT NULL
)"""

_DELIVERIES = """CREATE TABLE {exists}webhook_deliveries (
    delivery_id TEXT PRIMARY KEY,
    subscription_id TEXT NOT NULL,
    swarm_name TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    task_id TEXT,
    payload TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    retry_index INTEGER NOT NULL DEFAULT 0,
    next_attempt_at {real} NOT NULL,
    lease_owner TEXT,
    lease_until {real},
    last_status INTEGER,
    last_error TEXT,
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    finished_at {real},
    UNIQUE (subscription_id, event_id)
)"""

_ATTEMPTS = """CREATE TABLE {exists}webhook_attempts (
    delivery_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    started_at {real} NOT NULL,
    status_code INTEGER,
    latency_ms {real} NOT NULL,
    response_excerpt TEXT NOT NULL DEFAULT '',
    error TEXT,
    outcome TEXT NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
)"""

_INDEXES: tuple[tuple[str, str], ...] = (
    (
        "mail_webhook_subscriptions_owner_idx",
        "webhook_subscriptions (swarm_name, owner_role, owner_id, kind)",
    ),
    ("mail_webhook_subscriptions_task_idx", "webhook_subscriptions (task_id)"),
    ("mail_webhook_events_swarm_idx", "webhook_events (swarm_name, created_at)"),
    (
        "mail_webhook_deliveries_due_idx",
        "webhook_deliveries (swarm_name, status, next_attempt_at)",
    ),
    (
        "mail_webhook_deliveries_subscription_idx",
        "webhook_deliveries (subscription_id, created_at)",
    ),
)


_TEMPLATES = (_SUBSCRIPTIONS, _EVENTS, _DELIVERIES, _ATTEMPTS)
_KINDS = {"TEXT": "text", "INTEGER": "int", "{real}": "real", "{bool}": "bool"}


def _columns(template: str) -> tuple[tuple[str, str], ...]:
    """(column, kind) of each column line of a table's DDL; a type not in _KINDS is an error."""
    lines = re.findall(r"^    (\w+) ([^\s,]+)", template, re.M)
    return tuple(
        (column, _KINDS[kind]) for column, kind in lines if column not in ("UNIQUE", "PRIMARY")
    )


# table -> ((column, kind), ...) in the tables' order, as `mail.store.copy` moves them.
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    name: _columns(t) for name, t in zip(TABLES, _TEMPLATES, strict=True)
}


def _ddl(template: str, dialect: str) -> str:
    if dialect == "sqlite":
        return template.format(exists="", bool="INTEGER", true="1", real="REAL")
    return template.format(
        exists="IF NOT EXISTS ", bool="BOOLEAN", true="TRUE", real="DOUBLE PRECISION"
    )


# SQLite: schema version 2 (store.sqlite_schema.MIGRATIONS).
SQLITE_MIGRATION: tuple[str, ...] = (
    *(_ddl(t, "sqlite") for t in _TEMPLATES),
    *(f"CREATE INDEX {name} ON {target}" for name, target in _INDEXES),
)

# PostgreSQL: table -> CREATE TABLE IF NOT EXISTS, and CREATE INDEX IF NOT EXISTS
# statements, merged into store.postgres_schema's set-up.
POSTGRES_TABLE_DDL: dict[str, str] = {
    name: _ddl(template, "postgres") for name, template in zip(TABLES, _TEMPLATES, strict=True)
}
POSTGRES_INDEXES: tuple[str, ...] = tuple(
    f"CREATE INDEX IF NOT EXISTS {name} ON {target}" for name, target in _INDEXES
)

# The outbox row the task store writes with the event that causes it (write kind
# "webhook_event" of store.sql_batch): args swarm, role, id, event_id, task_id, type, payload,
# created_at. A batch retried after a failure writes it again: the second copy is ignored.
SQLITE_OUTBOX_SQL = """
    INSERT INTO webhook_events (swarm_name, caller_role, caller_id, event_id, task_id,
                                event_type, payload, created_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (event_id) DO NOTHING
"""
POSTGRES_OUTBOX_SQL = """
    INSERT INTO webhook_events (swarm_name, caller_role, caller_id, event_id, task_id,
                                event_type, payload, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (event_id) DO NOTHING
"""
