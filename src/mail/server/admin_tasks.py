"""``GET /tasks/all`` (admin): every live instance's tasks, as summaries, one page at a time.

Like ``GET /tasks``: summaries without the event log (``event_count`` says how long it is),
newest first, at most ``limit`` per page, the next page named by ``X-Next-Cursor``. The body
keeps the original's shape, ``{"tasks": [...]}``, each record with ``"instance"`` (whose task
it is). ``?task_id=<id>`` answers that one task's full record (events included) from whichever
instance holds it: that is how an operator opens another caller's task.
"""

from __future__ import annotations

from typing import Any

from mail.server import task_listing
from mail.server.messaging import task_record, task_summary
from mail.server.state import ServerState


def all_tasks_page(
    state: ServerState, limit: int, cursor: str | None, task_id: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    after = task_listing.decode_cursor(cursor)
    records: list[dict[str, Any]] = []
    for inst in state.instances.all():
        runtime = inst.swarm.runtime
        if task_id is not None:
            task = inst.swarm.get_task_by_id(task_id) if task_id != "*" else None
            if task is not None:
                return [{**task_record(task, runtime), "instance": inst.owner}], None
            continue
        for tid, task in inst.swarm.get_all_tasks().items():
            if tid == "*":  # runtime-internal pseudo-task of loop-level events
                continue
            records.append({**task_summary(task, runtime), "instance": inst.owner})
    if task_id is not None:
        return [], None
    return task_listing.page_list(records, limit, after)
