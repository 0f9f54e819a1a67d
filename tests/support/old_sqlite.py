"""SQLite files as earlier releases of mail made them: the statements of schema versions 1 to
4 as they were released (version 5 rebuilt the agent histories), for upgrade tests."""

from __future__ import annotations

import sqlite3

RELEASED: dict[int, tuple[str, ...]] = {
    1: (
        (
            "CREATE TABLE tasks (swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, caller_id "
            "TEXT NOT NULL, task_id TEXT NOT NULL, task_owner TEXT NOT NULL DEFAULT '', "
            "task_contributors TEXT NOT NULL DEFAULT '[]', remote_swarms TEXT NOT NULL DEFAULT "
            "'[]', is_running INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL DEFAULT 0, "
            "title TEXT, start_time TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}', "
            "created_at TEXT, updated_at TEXT, UNIQUE (task_id, swarm_name, caller_role, "
            "caller_id))"
        ),
        "CREATE INDEX mail_tasks_instance_idx ON tasks (swarm_name, caller_role, caller_id)",
        (
            "CREATE TABLE task_events (seq INTEGER PRIMARY KEY AUTOINCREMENT, swarm_name TEXT NOT"
            " NULL, caller_role TEXT NOT NULL, caller_id TEXT NOT NULL, task_id TEXT NOT NULL, "
            "event_type TEXT, event_data TEXT, event_id TEXT, created_at TEXT)"
        ),
        (
            "CREATE INDEX mail_task_events_instance_idx ON task_events (swarm_name, caller_role, "
            "caller_id, task_id, seq)"
        ),
        (
            "CREATE TABLE agent_histories (swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, "
            "caller_id TEXT NOT NULL, task_id TEXT NOT NULL, agent_name TEXT NOT NULL, "
            "tool_format TEXT NOT NULL, history TEXT NOT NULL, created_at TEXT, updated_at TEXT, "
            "UNIQUE (swarm_name, caller_role, caller_id, task_id, agent_name))"
        ),
        (
            "CREATE TABLE task_responses (swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, "
            "caller_id TEXT NOT NULL, task_id TEXT NOT NULL, response TEXT NOT NULL, created_at "
            "TEXT, UNIQUE (task_id, swarm_name, caller_role, caller_id))"
        ),
        (
            "CREATE TABLE task_queues (swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, "
            "caller_id TEXT NOT NULL, task_id TEXT NOT NULL, items TEXT NOT NULL, created_at "
            "TEXT, updated_at TEXT, UNIQUE (task_id, swarm_name, caller_role, caller_id))"
        ),
        (
            "CREATE TABLE agent_memories (namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT "
            "NOT NULL, created_at TEXT, updated_at TEXT, PRIMARY KEY (namespace, key))"
        ),
        (
            "CREATE TABLE instance_generations (swarm_name TEXT NOT NULL, caller_role TEXT NOT "
            "NULL, caller_id TEXT NOT NULL, generation INTEGER NOT NULL, claimed_at TEXT, holder "
            "TEXT NOT NULL DEFAULT '', PRIMARY KEY (swarm_name, caller_role, caller_id))"
        ),
        (
            "CREATE TABLE team_threads (swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, "
            "caller_id TEXT NOT NULL, thread_id TEXT NOT NULL, record TEXT NOT NULL, created_at "
            "TEXT, PRIMARY KEY (swarm_name, caller_role, caller_id, thread_id))"
        ),
        (
            "CREATE TABLE team_posts (seq INTEGER PRIMARY KEY AUTOINCREMENT, swarm_name TEXT NOT "
            "NULL, caller_role TEXT NOT NULL, caller_id TEXT NOT NULL, thread_id TEXT NOT NULL, "
            "record TEXT NOT NULL)"
        ),
        (
            "CREATE INDEX team_posts_thread ON team_posts (swarm_name, caller_role, caller_id, "
            "thread_id, seq)"
        ),
        (
            "CREATE TABLE team_inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, swarm_name TEXT NOT "
            "NULL, caller_role TEXT NOT NULL, caller_id TEXT NOT NULL, agent_name TEXT NOT NULL, "
            "entry_id TEXT NOT NULL, thread_id TEXT, ts TEXT NOT NULL, is_read INTEGER NOT NULL "
            "DEFAULT 0, shown INTEGER NOT NULL DEFAULT 0, record TEXT NOT NULL, UNIQUE "
            "(swarm_name, caller_role, caller_id, agent_name, entry_id))"
        ),
        (
            "CREATE INDEX team_inbox_agent ON team_inbox (swarm_name, caller_role, caller_id, "
            "agent_name, seq)"
        ),
        (
            "CREATE TABLE team_attachments (swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, "
            "caller_id TEXT NOT NULL, attachment_id TEXT NOT NULL, record TEXT NOT NULL, data "
            "BLOB NOT NULL, created_at TEXT, PRIMARY KEY (swarm_name, caller_role, caller_id, "
            "attachment_id))"
        ),
    ),
    2: (
        (
            "CREATE TABLE webhook_subscriptions ( subscription_id TEXT PRIMARY KEY, swarm_name "
            "TEXT NOT NULL, owner_role TEXT NOT NULL, owner_id TEXT NOT NULL, kind TEXT NOT NULL,"
            " scope TEXT NOT NULL DEFAULT 'own', task_id TEXT, url TEXT NOT NULL, destination "
            "TEXT NOT NULL, events TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', active "
            "INTEGER NOT NULL DEFAULT 1, disabled_reason TEXT, secret TEXT, previous_secret TEXT,"
            " previous_secret_until REAL, push_token TEXT, push_auth TEXT, failing_since REAL, "
            "created_at REAL NOT NULL, updated_at REAL NOT NULL, expires_at REAL )"
        ),
        (
            "CREATE TABLE webhook_events ( event_id TEXT PRIMARY KEY, swarm_name TEXT NOT NULL, "
            "caller_role TEXT NOT NULL, caller_id TEXT NOT NULL, task_id TEXT NOT NULL, "
            "event_type TEXT NOT NULL, payload TEXT NOT NULL, created_at REAL NOT NULL )"
        ),
        (
            "CREATE TABLE webhook_deliveries ( delivery_id TEXT PRIMARY KEY, subscription_id TEXT"
            " NOT NULL, swarm_name TEXT NOT NULL, event_id TEXT NOT NULL, event_type TEXT NOT "
            "NULL, task_id TEXT, payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER "
            "NOT NULL DEFAULT 0, retry_index INTEGER NOT NULL DEFAULT 0, next_attempt_at REAL NOT"
            " NULL, lease_owner TEXT, lease_until REAL, last_status INTEGER, last_error TEXT, "
            "created_at REAL NOT NULL, updated_at REAL NOT NULL, finished_at REAL, UNIQUE "
            "(subscription_id, event_id) )"
        ),
        (
            "CREATE TABLE webhook_attempts ( delivery_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
            " started_at REAL NOT NULL, status_code INTEGER, latency_ms REAL NOT NULL, "
            "response_excerpt TEXT NOT NULL DEFAULT '', error TEXT, outcome TEXT NOT NULL, "
            "PRIMARY KEY (delivery_id, attempt) )"
        ),
        (
            "CREATE INDEX mail_webhook_subscriptions_owner_idx ON webhook_subscriptions "
            "(swarm_name, owner_role, owner_id, kind)"
        ),
        "CREATE INDEX mail_webhook_subscriptions_task_idx ON webhook_subscriptions (task_id)",
        ("CREATE INDEX mail_webhook_events_swarm_idx ON webhook_events (swarm_name, created_at)"),
        (
            "CREATE INDEX mail_webhook_deliveries_due_idx ON webhook_deliveries (swarm_name, "
            "status, next_attempt_at)"
        ),
        (
            "CREATE INDEX mail_webhook_deliveries_subscription_idx ON webhook_deliveries "
            "(subscription_id, created_at)"
        ),
    ),
    3: (
        (
            "CREATE TABLE idempotency_keys (swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, "
            "caller_id TEXT NOT NULL, idem_key TEXT NOT NULL, fingerprint TEXT NOT NULL, subject "
            "TEXT, context TEXT NOT NULL DEFAULT '{}', status INTEGER, content_type TEXT, body "
            "BLOB, holder TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, expires_at REAL NOT"
            " NULL, PRIMARY KEY (swarm_name, caller_role, caller_id, idem_key)) WITHOUT ROWID"
        ),
    ),
    4: (
        (
            "CREATE TABLE idempotency_keys_rowid (swarm_name TEXT NOT NULL, caller_role TEXT NOT "
            "NULL, caller_id TEXT NOT NULL, idem_key TEXT NOT NULL, fingerprint TEXT NOT NULL, "
            "subject TEXT, context TEXT NOT NULL DEFAULT '{}', status INTEGER, content_type TEXT,"
            " body BLOB, holder TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, expires_at "
            "REAL NOT NULL, PRIMARY KEY (swarm_name, caller_role, caller_id, idem_key))"
        ),
        "INSERT INTO idempotency_keys_rowid SELECT * FROM idempotency_keys",
        "DROP TABLE idempotency_keys",
        "ALTER TABLE idempotency_keys_rowid RENAME TO idempotency_keys",
    ),
}


def write_schema(conn: sqlite3.Connection, version: int) -> None:
    """Make the tables of schema `version` (1-4) in an empty file, and stamp it so."""
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for number in range(1, version + 1):
        for statement in RELEASED[number]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, '2026-01-01')", (number,))
    conn.commit()
