"""What the two SQL stores (PostgreSQL, SQLite) share when they read: a `tasks` row as a task
record, one row of an instance's read into its snapshot, and the SELECTs of that read."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from mail.store.records import TASK_FIELDS, InstanceSnapshot


def task_from_row(row: Mapping[str, Any], start_time: Callable[[Any], str]) -> dict[str, Any]:
    """A task record from a `tasks` row (metadata merged in, JSON list columns decoded)."""
    record: dict[str, Any] = {}
    metadata = row["metadata"]
    if metadata:
        record.update(json.loads(metadata))
    for name in TASK_FIELDS:
        value = row[name]
        if name in ("task_contributors", "remote_swarms"):
            value = json.loads(value) if value is not None else []
        elif name in ("is_running", "completed") and value is not None:
            value = bool(value)
        elif name == "start_time" and value is not None:
            value = start_time(value)
        record[name] = value
    return record


def add_snapshot_row(
    snapshot: InstanceSnapshot,
    table: str,
    row: Mapping[str, Any],
    start_time: Callable[[Any], str],
) -> None:
    """Put one row of a read of `table` into a snapshot (`start_time`: the dialect's
    start_time column value as ISO 8601 text)."""
    task_id = row["task_id"]
    if table == "tasks":
        snapshot.tasks[task_id] = task_from_row(row, start_time)
    elif table == "task_events":
        snapshot.events.setdefault(task_id, []).append(
            {"event": row["event_type"], "data": row["event_data"], "id": row["event_id"]}
        )
    elif table == "agent_histories":
        # A history's segments come in order (`start`) and are joined into one list, as far
        # as they follow on: past a segment that was never stored (a write dropped while later
        # ones were queued) the history reads as it was before it, until its next whole save.
        histories, name, start = snapshot.histories, (task_id, row["agent_name"]), row["start"]
        history = histories.get(name)
        if start == (0 if history is None else len(history)):
            if history is None:
                histories[name] = json.loads(row["history"])
            else:
                history.extend(json.loads(row["history"]))
    elif table == "task_responses":
        snapshot.responses[task_id] = json.loads(row["response"])
    elif table == "task_queues":
        snapshot.queues[task_id] = json.loads(row["items"])
    else:  # pragma: no cover - our own constant list
        raise ValueError(f"unknown table {table}")


_TASK_COLUMNS = (
    "task_id, task_owner, task_contributors, remote_swarms, is_running, completed, title,"
    " start_time, metadata"
)
# What `load_instance` reads besides tasks: table -> columns, in the order rows come back.
_SNAPSHOT_READS: tuple[tuple[str, str, str], ...] = (
    ("task_events", "task_id, event_type, event_data, event_id", " ORDER BY seq"),
    (
        "agent_histories",
        "task_id, agent_name, start, history",
        " ORDER BY task_id, agent_name, start",
    ),
    ("task_responses", "task_id, response", ""),
    ("task_queues", "task_id, items", ""),
)


def snapshot_queries(instance: str, task_order: str) -> tuple[tuple[str, str], ...]:
    """(table, SELECT) pairs that read one instance for `load_instance`, tasks first.

    `instance` is the dialect's condition on the three key columns, `task_order` the
    ORDER BY of the tasks (start time, then insertion order).
    """
    return (
        ("tasks", f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {instance} ORDER BY {task_order}"),
        *(
            (table, f"SELECT {columns} FROM {table} WHERE {instance}{order}")
            for table, columns, order in _SNAPSHOT_READS
        ),
    )
