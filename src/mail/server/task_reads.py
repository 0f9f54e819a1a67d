"""Reading a caller's tasks: one page of summaries (GET /tasks) and one task's full record
(GET /task/{id}), from the live instance, its archive and the store."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from mail.server import task_listing
from mail.server.auth import Caller
from mail.server.instances import Instance
from mail.server.sse import event_record
from mail.server.state import ServerState
from mail.telemetry.usage import task_usage
from mail.utils.echo import echo


def live_summaries(inst: Instance) -> dict[str, dict[str, Any]]:
    """The summaries of the tasks the instance holds ("*": the runtime's pseudo-task of
    loop-level events, not a task)."""
    runtime = inst.swarm.runtime
    tasks = inst.swarm.get_all_tasks().items()
    return {task_id: task_summary(task, runtime) for task_id, task in tasks if task_id != "*"}


async def caller_summaries(
    state: ServerState,
    role: str,
    caller_id: str,
    inst: Instance | None,
    limit: int | None = None,
    before: tuple[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The caller's task summaries: archived with its reclaimed instance, held by `inst`,
    and the finished ones that left memory (all, or the newest `limit` before `before`)."""
    archived = state.instances.archived_tasks(role, caller_id)
    records = {task_id: task_listing.summary(r) for task_id, r in archived.items()}
    if inst is not None:
        records.update(live_summaries(inst))
    stored = await state.finished.stored_summaries(
        role, caller_id, live=records, limit=limit, before=before
    )
    return {**stored, **records}


def task_record(task: Any, runtime: Any) -> dict[str, Any]:
    record = task.to_dict()
    events = record.get("events")
    if isinstance(events, list):
        record["events"] = [event_record(e, parse_data=False) for e in events]
    record["pending_breakpoints"] = runtime.pending_breakpoints(task.task_id)
    record["usage"] = task_usage(task).as_dict()
    record.update(task_listing.preview(task))
    return record


def task_summary(task: Any, runtime: Any) -> dict[str, Any]:
    record: dict[str, Any] = task.to_dict(include_events=False)
    record["event_count"] = len(task.events)
    record["pending_breakpoints"] = runtime.pending_breakpoints(task.task_id)
    record["usage"] = task_usage(task).total.as_dict()
    record.update(task_listing.preview(task))
    return record


async def _remote_swarm_summaries(
    state: ServerState, limit: int, after: tuple[str, str] | None
) -> dict[str, dict[str, Any]]:
    """Tasks that remote swarms contribute to on this server (their `swarm` instances): the
    ones they hold, and (as for the caller's own) the finished ones that left memory, read
    back from the store (a page of each instance's newest before `after`)."""
    records: dict[str, dict[str, Any]] = {}
    held: set[str] = set()
    for other in state.instances.all():
        if other.kind != "swarm":
            continue
        held.add(other.id)
        live = live_summaries(other)
        stored = await state.finished.stored_summaries(
            other.kind, other.id, live=live, limit=limit, before=after
        )
        records.update(stored)
        records.update(live)
    # Remote swarms whose instance left memory (reclaimed while idle, a restart): their
    # tasks are in the store only.
    for caller_id in await state.finished.stored_callers("swarm"):
        if caller_id not in held:
            records.update(
                await state.finished.stored_summaries("swarm", caller_id, limit=limit, before=after)
            )
    return records


async def list_tasks(
    state: ServerState,
    caller: Caller,
    limit: int = task_listing.DEFAULT_PAGE,
    cursor: str | None = None,
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """One page of the caller's task summaries (no event logs) and the next page's cursor."""
    after = task_listing.decode_cursor(cursor)
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    inst.touch()
    records = await caller_summaries(state, caller.role, caller.id, inst, limit, after)
    if caller.role == "admin":
        # Operators also see the work remote swarms do here; users only ever see their own.
        records = {**await _remote_swarm_summaries(state, limit, after), **records}
    return task_listing.page(list(records.values()), limit, after)


async def get_task(state: ServerState, caller: Caller, task_id: str) -> dict[str, Any]:
    inst = await state.instances.get(caller.role, caller.id, caller.api_key)
    inst.touch()
    task = None if task_id == "*" else inst.swarm.get_task_by_id(task_id)
    if task is not None:
        return task_record(task, inst.swarm.runtime)
    archived = state.instances.archived_tasks(caller.role, caller.id).get(task_id)
    if archived is not None:
        return archived
    finished = state.finished
    stored = await finished.stored_task(inst.kind, inst.id, task_id)
    if stored is not None:
        return task_record(stored, inst.swarm.runtime)
    if caller.role == "admin":
        # The tasks remote swarms run here are listed for operators; their logs are here.
        for other in state.instances.all():
            remote = other.swarm.get_task_by_id(task_id) if other.kind == "swarm" else None
            if remote is not None:
                return task_record(remote, other.swarm.runtime)
        for key in await finished.owners(task_id):
            if key.caller_role == "swarm":
                found = await finished.stored_task(key.caller_role, key.caller_id, task_id)
                if found is not None:
                    return task_record(found, inst.swarm.runtime)
    raise HTTPException(404, f"task '{echo(task_id)}' not found")
