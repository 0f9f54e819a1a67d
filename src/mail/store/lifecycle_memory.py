"""`TaskLifecycle` of the in-process `MemoryTaskStore` (tests, and code that embeds one)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from mail.store.base import InstanceKey, InstanceSnapshot, json_copy, to_json
from mail.store.lifecycle import (
    PRUNE_BATCH,
    Cursor,
    PruneReport,
    TaskLifecycle,
    queue_keys,
    record_is_finished,
)
from mail.store.tasks_memory import MemoryTaskStore, _InstanceData


class MemoryLifecycle(TaskLifecycle):
    store: MemoryTaskStore

    def _data(self, key: InstanceKey) -> _InstanceData | None:
        return self.store._instances.get(key)

    async def records(
        self, key: InstanceKey, *, limit: int | None = None, before: Cursor | None = None
    ) -> dict[str, dict[str, Any]]:
        data = self._data(key)
        if data is None:
            return {}
        ordered = sorted(data.tasks.items(), key=lambda item: (item[1]["start_time"], item[0]))
        if limit is not None:
            ordered.reverse()
            if before is not None:
                ordered = [(t, r) for t, r in ordered if (r["start_time"], t) < before]
            ordered = ordered[:limit]
        out = {}
        for task_id, record in ordered:
            copied = json_copy(record)
            copied["event_count"] = len(data.events.get(task_id, ()))
            out[task_id] = copied
        return out

    async def load_tasks(self, key: InstanceKey, task_ids: Sequence[str]) -> InstanceSnapshot:
        data = self._data(key)
        snapshot = InstanceSnapshot()
        if data is None:
            return snapshot
        wanted = set(task_ids)
        for task_id in task_ids:
            if task_id in data.tasks:
                snapshot.tasks[task_id] = json_copy(data.tasks[task_id])
            if task_id in data.events:
                snapshot.events[task_id] = json_copy(data.events[task_id])
            if task_id in data.responses:
                snapshot.responses[task_id] = json_copy(data.responses[task_id])
        for (task_id, agent), history in data.histories.items():
            if task_id in wanted:
                snapshot.histories[(task_id, agent)] = json_copy(history)
        for queue_key in queue_keys(task_ids):
            if queue_key in data.queues:
                snapshot.queues[queue_key] = json_copy(data.queues[queue_key])
        return snapshot

    async def owners(self, task_id: str) -> list[InstanceKey]:
        return [key for key, data in self.store._instances.items() if task_id in data.tasks]

    async def callers(self, swarm_name: str, caller_role: str) -> list[str]:
        return [
            key.caller_id
            for key, data in self.store._instances.items()
            if key.swarm_name == swarm_name and key.caller_role == caller_role and data.tasks
        ]

    async def running_callers(self, swarm_name: str, limit: int) -> list[InstanceKey]:
        oldest: list[tuple[str, InstanceKey]] = []
        for key, data in self.store._instances.items():
            starts = [
                str(r.get("start_time") or "")
                for r in data.tasks.values()
                if r.get("is_running") and r.get("state", "running") == "running"
            ]
            if key.swarm_name == swarm_name and starts:
                oldest.append((min(starts), key))
        return [key for _start, key in sorted(oldest, key=lambda pair: pair[0])[:limit]]

    async def save_summaries(self, key: InstanceKey, summaries: dict[str, dict[str, Any]]) -> None:
        data = self._data(key)
        for task_id, summary in summaries.items():
            if data is not None and task_id in data.tasks:
                data.tasks[task_id]["summary"] = json_copy(summary)

    async def task_bytes(self, key: InstanceKey, task_ids: Sequence[str]) -> dict[str, int]:
        data = self._data(key)
        sizes = dict.fromkeys(task_ids, 0)
        if data is None:
            return sizes
        for task_id in task_ids:
            size = sum(len((e.get("data") or "").encode()) for e in data.events.get(task_id, ()))
            if task_id in data.responses:
                size += len(to_json(data.responses[task_id]).encode())
            for queue_key in queue_keys([task_id]):
                if queue_key in data.queues:
                    size += len(to_json(data.queues[queue_key]).encode())
            sizes[task_id] = size
        for (task_id, _agent), history in data.histories.items():
            if task_id in sizes:
                sizes[task_id] += len(to_json(history).encode())
        return sizes

    async def _prune_batch(self, cutoff: _dt.datetime) -> PruneReport:
        report = PruneReport()
        for key, data in self.store._instances.items():
            for task_id, record in list(data.tasks.items()):
                if len(report.tasks) >= PRUNE_BATCH:
                    break
                updated = data.updated.get(task_id)
                if updated is None or updated >= cutoff or not record_is_finished(record):
                    continue
                report.add_files(record.get("files"))
                report.rows += _drop(data, task_id)
                report.tasks.append((key, task_id))
        report.batches = 1 if report.tasks else 0
        return report


def _drop(data: _InstanceData, task_id: str) -> int:
    rows = 1 + len(data.events.pop(task_id, ()))
    data.tasks.pop(task_id, None)
    data.updated.pop(task_id, None)
    rows += data.responses.pop(task_id, None) is not None
    for queue_key in queue_keys([task_id]):
        rows += data.queues.pop(queue_key, None) is not None
    for history_key in [k for k in data.histories if k[0] == task_id]:
        data.histories.pop(history_key)
        data.formats.pop(history_key, None)
        rows += 1
    return rows
