"""Tasks that live in the store rather than in a runtime: loading, rebuilding, putting back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mail.core.events import events_from_records
from mail.core.finished_tasks import FINISHED
from mail.core.tasks import MAILTask, state_from_record

if TYPE_CHECKING:
    from mail.store.base import InstanceKey, InstanceSnapshot


def record_is_open(record: dict[str, Any]) -> bool:
    """Whether a stored task record is running or paused (an instance loads those)."""
    return state_from_record(record) not in FINISHED


async def load_open_snapshot(store: Any, key: InstanceKey) -> InstanceSnapshot:
    """The running and paused tasks of an instance, whole; finished ones stay in the store."""
    from mail.store import lifecycle_for

    lifecycle = lifecycle_for(store)
    if lifecycle is None:
        snapshot: InstanceSnapshot = await store.load_instance(key)
        return snapshot
    records = await lifecycle.records(key)
    return await lifecycle.load_tasks(key, [t for t, r in records.items() if record_is_open(r)])


def task_from_snapshot(snapshot: InstanceSnapshot, task_id: str) -> MAILTask | None:
    """A stored task as a `MAILTask` of no runtime (to show it), or None when absent."""
    record = snapshot.tasks.get(task_id)
    if record is None:
        return None
    task = MAILTask.from_store_record(record)
    task.events = events_from_records(snapshot.events.get(task_id, []))
    task.response = snapshot.responses.get(task_id)
    task.task_message_queue = list(snapshot.queues.get(task_id, []))
    return task


def restore_task(swarm: Any, snapshot: InstanceSnapshot) -> bool:
    """Put stored tasks back into a live instance (a finished task that gets a new message);
    False when there was nothing to restore. A task the runtime already has is left alone."""
    from mail.api.persistence import restore_snapshot

    runtime = swarm.runtime
    fresh = {t: r for t, r in snapshot.tasks.items() if t not in runtime.mail_tasks}
    if not fresh:
        return False
    restore_snapshot(runtime, snapshot)
    observer = getattr(swarm, "_store_observer", None)
    if observer is not None:
        observer.note_stored_queues(snapshot.queues)
    return True
