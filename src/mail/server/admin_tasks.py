"""``GET /tasks/all`` (admin): every live instance's tasks, as summaries, one page at a time."""

from __future__ import annotations

from typing import Any

from mail.server import task_listing
from mail.server.state import ServerState
from mail.server.task_reads import task_record, task_summary


async def all_tasks_page(
    state: ServerState, limit: int, cursor: str | None, task_id: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    after = task_listing.decode_cursor(cursor)
    if task_id is not None:
        return await _one_task(state, task_id), None
    records: list[dict[str, Any]] = []
    finished = state.finished
    for inst in state.instances.all():
        runtime = inst.swarm.runtime
        live = {}
        for tid, task in inst.swarm.get_all_tasks().items():
            if tid == "*":  # runtime-internal pseudo-task of loop-level events
                continue
            live[tid] = {**task_summary(task, runtime), "instance": inst.owner}
        if finished is not None:  # its finished tasks, read back from the store
            stored = await finished.stored_summaries(
                inst.kind, inst.id, live=live, limit=limit, before=after
            )
            records.extend({**row, "instance": inst.owner} for row in stored.values())
        records.extend(live.values())
    return task_listing.page_list(records, limit, after)


async def _one_task(state: ServerState, task_id: str) -> list[dict[str, Any]]:
    """The full record of one task of any live instance (live or stored), or nothing."""
    if task_id == "*":
        return []
    for inst in state.instances.all():
        task = inst.swarm.get_task_by_id(task_id)
        if task is not None:
            return [{**task_record(task, inst.swarm.runtime), "instance": inst.owner}]
    finished = state.finished
    if finished is None:
        return []
    for key in await finished.owners(task_id):
        owner = state.instances.peek(key.caller_role, key.caller_id)
        if owner is None:
            continue
        stored = await finished.stored_task(key.caller_role, key.caller_id, task_id)
        if stored is not None:
            return [{**task_record(stored, owner.swarm.runtime), "instance": owner.owner}]
    return []
