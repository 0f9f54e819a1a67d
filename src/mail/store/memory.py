"""In-process TaskStore: the default when no DATABASE_URL is configured.

Data lives as long as the process. It still matters: the server reclaims idle per-user
instances and rebuilds them from the store, so the store has to hold real copies. Every
write is JSON-normalised (which is also a deep copy), so later mutation of the runtime's
live objects cannot change what was stored, and both stores return the same shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from mail.store.base import (
    InstanceKey,
    InstanceSnapshot,
    TaskStore,
    detect_tool_format,
    json_copy,
    normalize_event,
    normalize_start_time,
    split_task_record,
)


class _InstanceData:
    __slots__ = ("tasks", "events", "histories", "formats", "responses", "queues")

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.histories: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.formats: dict[tuple[str, str], str] = {}
        self.responses: dict[str, dict[str, Any]] = {}
        self.queues: dict[str, list[dict[str, Any]]] = {}


class MemoryTaskStore(TaskStore):
    """Dictionaries per InstanceKey. All methods are effectively synchronous."""

    def __init__(self) -> None:
        self._instances: dict[InstanceKey, _InstanceData] = {}
        self._closed = False

    def _data(self, key: InstanceKey) -> _InstanceData:
        data = self._instances.get(key)
        if data is None:
            data = self._instances[key] = _InstanceData()
        return data

    async def start(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True

    async def flush(self, timeout: float | None = None) -> bool:
        return True

    async def upsert_task(self, key: InstanceKey, record: Mapping[str, Any]) -> None:
        columns, extra = split_task_record(record)
        tasks = self._data(key).tasks
        task_id = columns["task_id"]
        current = tasks.get(task_id)
        if current is None:
            # Same defaults as the database columns.
            current = {
                "task_id": task_id,
                "task_owner": "",
                "task_contributors": [],
                "remote_swarms": [],
                "is_running": False,
                "completed": False,
                "title": None,
                # The database defaults a missing start time to "now"; so do we.
                "start_time": normalize_start_time(datetime.now(UTC)),
            }
            tasks[task_id] = current
        current.update(columns)
        current.update(extra)

    async def append_event(self, key: InstanceKey, task_id: str, event: Any) -> None:
        self._data(key).events.setdefault(task_id, []).append(normalize_event(event))

    async def save_history(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> None:
        data = self._data(key)
        copied = json_copy(list(history))
        data.histories[(task_id, agent_name)] = copied
        data.formats[(task_id, agent_name)] = tool_format or detect_tool_format(copied)

    async def save_response(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> None:
        self._data(key).responses[task_id] = json_copy(dict(response))

    async def save_queue(self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]) -> None:
        self._data(key).queues[task_id] = json_copy(list(items))

    async def delete_queue(self, key: InstanceKey, task_id: str) -> None:
        self._data(key).queues.pop(task_id, None)

    async def load_instance(self, key: InstanceKey) -> InstanceSnapshot:
        data = self._instances.get(key)
        if data is None:
            return InstanceSnapshot()
        # Hand out copies: the runtime will mutate what it rebuilds from the snapshot.
        return InstanceSnapshot(
            tasks=json_copy(data.tasks),
            events=json_copy(data.events),
            histories={k: json_copy(v) for k, v in data.histories.items()},
            responses=json_copy(data.responses),
            queues=json_copy(data.queues),
        )

    @property
    def backend(self) -> str:
        return "memory"
