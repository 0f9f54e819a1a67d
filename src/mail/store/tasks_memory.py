"""In-process TaskStore: the default when no DATABASE_URL is configured."""

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
    __slots__ = ("tasks", "events", "histories", "formats", "responses", "queues", "updated")

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.histories: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.formats: dict[tuple[str, str], str] = {}
        self.responses: dict[str, dict[str, Any]] = {}
        self.queues: dict[str, list[dict[str, Any]]] = {}
        # task_id -> when its record last changed (the `updated_at` of the SQL stores)
        self.updated: dict[str, datetime] = {}


class _MemoryDatabase:
    """What a database would hold: instance data and the current generation per key."""

    __slots__ = ("instances", "generations")

    def __init__(self) -> None:
        self.instances: dict[InstanceKey, _InstanceData] = {}
        self.generations: dict[InstanceKey, int] = {}


class MemoryTaskStore(TaskStore):
    """Dictionaries per InstanceKey. All methods are effectively synchronous.

    `share_with` makes this store use another one's data, the way two processes share one
    database: each store object keeps its own claimed generations, so fencing between
    them behaves as with PostgreSQL (used by tests and single-machine experiments).
    """

    def __init__(self, *, share_with: MemoryTaskStore | None = None) -> None:
        super().__init__()
        self._db: _MemoryDatabase = share_with._db if share_with is not None else _MemoryDatabase()
        self._instances = self._db.instances
        self._closed = False

    async def claim_generation(self, key: InstanceKey, holder: str = "") -> int:
        generation = self._db.generations.get(key, 0) + 1
        self._db.generations[key] = generation
        self._fencing.claimed(key, generation)
        return generation

    def _admit(self, key: InstanceKey) -> bool:
        """Whether a write for `key` may be applied (always, for keys never claimed)."""
        fencing = self._fencing
        generation = fencing.generation_for(key)
        if generation is None:
            return True
        if fencing.drop_if_known_fenced(key, generation):
            return False
        current = self._db.generations.get(key)
        if current == generation:
            return True
        fencing.dropped(key, generation, 1, current)
        return False

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
        columns, extra = split_task_record(record)  # a bad record fails even when fenced
        if not self._admit(key):
            return
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
        self._data(key).updated[task_id] = datetime.now(UTC)

    async def append_event(self, key: InstanceKey, task_id: str, event: Any) -> None:
        if not self._admit(key):
            return
        self._data(key).events.setdefault(task_id, []).append(normalize_event(event))

    async def save_history(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> None:
        if not self._admit(key):
            return
        data = self._data(key)
        copied = json_copy(list(history))
        data.histories[(task_id, agent_name)] = copied
        data.formats[(task_id, agent_name)] = tool_format or detect_tool_format(copied)

    async def save_response(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> None:
        if not self._admit(key):
            return
        self._data(key).responses[task_id] = json_copy(dict(response))

    async def save_queue(self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]) -> None:
        if not self._admit(key):
            return
        self._data(key).queues[task_id] = json_copy(list(items))

    async def delete_queue(self, key: InstanceKey, task_id: str) -> None:
        if not self._admit(key):
            return
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
