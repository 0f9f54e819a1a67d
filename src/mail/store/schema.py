"""Every table MAIL stores, defined once: the DDL of SQLite and of PostgreSQL (`create_table`,
`create_indexes`) and the columns `mail db-copy` moves between them (`copied_columns`).

A table's body is its columns and constraints in one spelling for both databases, with these
words in braces: the types `{json}` (TEXT / JSONB), `{time}` (ISO 8601 TEXT / TIMESTAMPTZ),
`{bool}` (0 and 1 / BOOLEAN), `{real}` (REAL / DOUBLE PRECISION: epoch seconds), `{bytes}`
(BLOB / BYTEA), `{big}` (INTEGER / BIGINT) and `{seq}` (a sequence number given on insert),
and the values `{false}`, `{true}` and `{now}`. The tables the original's PostgreSQL schema
had carry a UUID `id` there too (`row_id`). Upgrades of files and schemas that earlier
versions wrote are `mail.store.sqlite_schema.migrate` and
`mail.store.postgres_schema.ensure_schema`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The current UTC time as ISO 8601 text, computed by SQLite itself (no Python call per row).
NOW_SQL = "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')"

_WORDS = {
    "sqlite": {
        "json": "TEXT",
        "time": "TEXT",
        "bool": "INTEGER",
        "real": "REAL",
        "bytes": "BLOB",
        "big": "INTEGER",
        "false": "0",
        "true": "1",
        "now": f"({NOW_SQL})",
    },
    "postgres": {
        "json": "JSONB",
        "time": "TIMESTAMPTZ",
        "bool": "BOOLEAN",
        "real": "DOUBLE PRECISION",
        "bytes": "BYTEA",
        "big": "BIGINT",
        "false": "FALSE",
        "true": "TRUE",
        "now": "NOW()",
    },
}
# Parts of bodies the tables share.
_PARTS = {
    "key": "swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, caller_id TEXT NOT NULL",
    "instance": "swarm_name, caller_role, caller_id",
    "per_task": "UNIQUE (task_id, swarm_name, caller_role, caller_id)",
    "changed": "created_at {time} DEFAULT {now}, updated_at {time} DEFAULT {now}",
}
# What `mail db-copy` converts a column's values as (`mail.store.copy`).
_KINDS = {"TEXT": "text", "INTEGER": "int", "{big}": "int", "{json}": "json", "{time}": "time"}
_KINDS.update({"{bool}": "bool", "{real}": "real", "{bytes}": "bytes"})


@dataclass(frozen=True, slots=True)
class Index:
    name: str
    columns: str
    unique: bool = False
    postgres_only: bool = False


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    body: str  # columns, then constraints; {key}, {instance}, {per_task}, {changed} are _PARTS
    copy_order: str | None = None  # the order `mail db-copy` reads rows in (None: not copied)
    indexes: tuple[Index, ...] = ()
    row_id: bool = False  # PostgreSQL: an `id UUID` key (the original's tables had one)


TASK_TABLES: tuple[Table, ...] = (
    Table(
        "tasks",
        """{key}, task_id TEXT NOT NULL, task_owner TEXT NOT NULL DEFAULT '',
        task_contributors {json} DEFAULT '[]', remote_swarms {json} DEFAULT '[]',
        is_running {bool} DEFAULT {false}, completed {bool} DEFAULT {false}, title TEXT,
        start_time {time} NOT NULL, metadata {json} NOT NULL DEFAULT '{}', {changed},
        {per_task}""",
        "start_time",
        (Index("mail_tasks_instance_idx", "{instance}"),),
        row_id=True,
    ),
    Table(
        "task_events",
        """seq {seq}, {key}, task_id TEXT NOT NULL, event_type TEXT, event_data TEXT,
        event_id TEXT, created_at {time} DEFAULT {now}""",
        "seq",
        (Index("mail_task_events_instance_idx", "{instance}, task_id, seq"),),
        row_id=True,
    ),
    Table(
        "agent_histories",
        """{key}, task_id TEXT NOT NULL, agent_name TEXT NOT NULL, tool_format TEXT NOT NULL,
        history {json} NOT NULL, {changed}, start INTEGER NOT NULL DEFAULT 0""",
        "task_id, agent_name, start",
        # A history is stored as segments, `start` the index of its first message.
        (
            Index(
                "mail_agent_histories_segment_uidx",
                "{instance}, task_id, agent_name, start",
                True,
            ),
        ),
        row_id=True,
    ),
    Table(
        "task_responses",
        """{key}, task_id TEXT NOT NULL, response {json} NOT NULL,
        created_at {time} DEFAULT {now}, {per_task}""",
        "task_id",
        (Index("mail_task_responses_instance_idx", "{instance}", postgres_only=True),),
        row_id=True,
    ),
    Table(  # the stashed queue of a paused task
        "task_queues",
        "{key}, task_id TEXT NOT NULL, items {json} NOT NULL, {changed}, {per_task}",
        "task_id",
        (Index("mail_task_queues_instance_idx", "{instance}", postgres_only=True),),
        row_id=True,
    ),
    Table(  # what `acknowledge_broadcast` remembers (mail.store.agent_memory)
        "agent_memories",
        """namespace TEXT NOT NULL, key TEXT NOT NULL, value {json} NOT NULL, {changed},
        PRIMARY KEY (namespace, key)""",
        "namespace, key",
    ),
    Table(  # the fencing token of each instance (cluster mode, takeovers): not copied
        "instance_generations",
        """{key}, generation {big} NOT NULL, claimed_at {time} NOT NULL DEFAULT {now},
        holder TEXT NOT NULL DEFAULT '', PRIMARY KEY ({instance})""",
    ),
)

# Team messaging (mail.store.team_base).
TEAM_TABLES: tuple[Table, ...] = (
    Table(
        "team_threads",
        """{key}, thread_id TEXT NOT NULL, record {json} NOT NULL,
        created_at {time} DEFAULT {now}, PRIMARY KEY ({instance}, thread_id)""",
        "created_at",
    ),
    Table(
        "team_posts",
        "seq {seq}, {key}, thread_id TEXT NOT NULL, record {json} NOT NULL",
        "seq",
        (Index("team_posts_thread", "{instance}, thread_id, seq"),),
    ),
    Table(
        "team_inbox",
        """seq {seq}, {key}, agent_name TEXT NOT NULL, entry_id TEXT NOT NULL, thread_id TEXT,
        ts TEXT NOT NULL, is_read {bool} NOT NULL DEFAULT {false},
        shown {bool} NOT NULL DEFAULT {false}, record {json} NOT NULL,
        UNIQUE ({instance}, agent_name, entry_id)""",
        "seq",
        (Index("team_inbox_agent", "{instance}, agent_name, seq"),),
    ),
    Table(
        "team_attachments",
        """{key}, attachment_id TEXT NOT NULL, record {json} NOT NULL, data {bytes} NOT NULL,
        created_at {time} DEFAULT {now}, PRIMARY KEY ({instance}, attachment_id)""",
        "attachment_id",
    ),
)

# Push delivery (webhooks, A2A push notifications): times are epoch seconds, payloads and
# event lists JSON kept as text. Subscriptions come before the deliveries that name them.
WEBHOOK_TABLES: tuple[Table, ...] = (
    Table(
        "webhook_subscriptions",
        """subscription_id TEXT PRIMARY KEY, swarm_name TEXT NOT NULL, owner_role TEXT NOT NULL,
        owner_id TEXT NOT NULL, kind TEXT NOT NULL, scope TEXT NOT NULL DEFAULT 'own',
        task_id TEXT, url TEXT NOT NULL, destination TEXT NOT NULL, events TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '', active {bool} NOT NULL DEFAULT {true},
        disabled_reason TEXT, secret TEXT, previous_secret TEXT, previous_secret_until {real},
        push_token TEXT, push_auth TEXT, failing_since {real}, created_at {real} NOT NULL,
        updated_at {real} NOT NULL, expires_at {real}""",
        "created_at, subscription_id",
        (
            Index("mail_webhook_subscriptions_owner_idx", "swarm_name, owner_role, owner_id, kind"),
            Index("mail_webhook_subscriptions_task_idx", "task_id"),
        ),
    ),
    Table(  # the outbox, written with the task event that causes it (mail.store.sql_batch)
        "webhook_events",
        """event_id TEXT PRIMARY KEY, swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL,
        caller_id TEXT NOT NULL, task_id TEXT NOT NULL, event_type TEXT NOT NULL,
        payload TEXT NOT NULL, created_at {real} NOT NULL""",
        "created_at, event_id",
        (Index("mail_webhook_events_swarm_idx", "swarm_name, created_at"),),
    ),
    Table(
        "webhook_deliveries",
        """delivery_id TEXT PRIMARY KEY, subscription_id TEXT NOT NULL, swarm_name TEXT NOT NULL,
        event_id TEXT NOT NULL, event_type TEXT NOT NULL, task_id TEXT, payload TEXT NOT NULL,
        status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
        retry_index INTEGER NOT NULL DEFAULT 0, next_attempt_at {real} NOT NULL,
        lease_owner TEXT, lease_until {real}, last_status INTEGER, last_error TEXT,
        created_at {real} NOT NULL, updated_at {real} NOT NULL, finished_at {real},
        UNIQUE (subscription_id, event_id)""",
        "created_at, delivery_id",
        (
            Index("mail_webhook_deliveries_due_idx", "swarm_name, status, next_attempt_at"),
            Index("mail_webhook_deliveries_subscription_idx", "subscription_id, created_at"),
        ),
    ),
    Table(
        "webhook_attempts",
        """delivery_id TEXT NOT NULL, attempt INTEGER NOT NULL, started_at {real} NOT NULL,
        status_code INTEGER, latency_ms {real} NOT NULL, response_excerpt TEXT NOT NULL DEFAULT '',
        error TEXT, outcome TEXT NOT NULL, PRIMARY KEY (delivery_id, attempt)""",
        "delivery_id, attempt",
    ),
)

# Idempotency keys (mail.store.idempotency), with their stored outcomes: copied, so a keyed
# retry against the copy is answered instead of run again.
IDEMPOTENCY_TABLE = Table(
    "idempotency_keys",
    """{key}, idem_key TEXT NOT NULL, fingerprint TEXT NOT NULL, subject TEXT,
    context TEXT NOT NULL DEFAULT '{}', status INTEGER, content_type TEXT, body {bytes},
    holder TEXT NOT NULL DEFAULT '', created_at {real} NOT NULL, expires_at {real} NOT NULL,
    PRIMARY KEY ({instance}, idem_key)""",
    "created_at, swarm_name, caller_role, caller_id, idem_key",
    (Index("idempotency_keys_expiry", "expires_at", postgres_only=True),),
)

TABLES: tuple[Table, ...] = (*TASK_TABLES, *TEAM_TABLES, *WEBHOOK_TABLES, IDEMPOTENCY_TABLE)
BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}


def _render(text: str, dialect: str) -> str:
    words = _WORDS[dialect]
    text = re.sub(r"\{(\w+)\}", lambda m: _PARTS.get(m.group(1), m.group(0)), text)
    return re.sub(r"\{(\w+)\}", lambda m: words[m.group(1)], " ".join(text.split()))


def create_table(table: Table, dialect: str) -> str:
    """`CREATE TABLE` of `table` (PostgreSQL: `IF NOT EXISTS`)."""
    body = table.body
    if dialect == "sqlite":
        body = body.replace("{seq}", "INTEGER PRIMARY KEY AUTOINCREMENT")
        return f"CREATE TABLE {table.name} ({_render(body, dialect)})"
    identity = "BIGINT GENERATED BY DEFAULT AS IDENTITY"
    body = body.replace("{seq}", identity if table.row_id else f"{identity} PRIMARY KEY")
    if table.row_id:
        body = f"id UUID PRIMARY KEY DEFAULT gen_random_uuid(), {body}"
    return f"CREATE TABLE IF NOT EXISTS {table.name} ({_render(body, dialect)})"


def create_indexes(table: Table, dialect: str) -> list[str]:
    exists = "IF NOT EXISTS " if dialect == "postgres" else ""
    return [
        f"CREATE {'UNIQUE ' if i.unique else ''}INDEX {exists}{i.name} ON {table.name}"
        f" ({_render(i.columns, dialect)})"
        for i in table.indexes
        if dialect == "postgres" or not i.postgres_only
    ]


def copied_columns(table: Table) -> tuple[tuple[str, str], ...]:
    """(column, kind) of each column `mail db-copy` moves; kind: text, int, json, time, bool,
    real or bytes (a sequence number is not moved: the target numbers rows anew)."""
    columns = []
    body = re.sub(r"\{(\w+)\}", lambda m: _PARTS.get(m.group(1), m.group(0)), table.body)
    for part in re.split(r",(?![^(]*\))", body):  # commas outside parentheses
        name, kind = part.split()[:2]
        if name not in ("UNIQUE", "PRIMARY") and kind != "{seq}":
            columns.append((name, _KINDS[kind]))  # (a type not in _KINDS: an error at import)
    return tuple(columns)


COPIED = {t.name: copied_columns(t) for t in TABLES if t.copy_order is not None}
