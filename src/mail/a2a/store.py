"""The A2A task records of the bridge: the SDK's in-memory store, bounded per caller.

Records (history, status, artifacts) are scoped per caller (``role:id``) by the SDK's
owner resolver. Each caller keeps at most ``[server.settings] max_a2a_tasks_per_caller``
records and ``max_a2a_task_bytes_per_caller`` bytes of them (serialized size); past either
bound the records updated longest ago are forgotten (their ``GetTask`` is then "task not
found"; the MAIL tasks themselves are untouched). The record being saved is always kept.
"""

from __future__ import annotations

from collections import OrderedDict

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import a2a_pb2
from a2a.types.a2a_pb2 import Task


class BoundedTaskStore(TaskStore):
    def __init__(self, max_tasks: int, max_bytes: int) -> None:
        self._inner = InMemoryTaskStore()
        self._max_tasks = max_tasks
        self._max_bytes = max_bytes
        # owner -> task id -> serialized size, least recently saved first.
        self._sizes: dict[str, OrderedDict[str, int]] = {}
        self._bytes: dict[str, int] = {}

    def _over(self, owner: str) -> bool:
        count = len(self._sizes[owner])
        if count <= 1:
            return False
        return (0 < self._max_tasks < count) or (0 < self._max_bytes < self._bytes[owner])

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._inner.save(task, context)
        owner = resolve_user_scope(context)
        sizes = self._sizes.setdefault(owner, OrderedDict())
        self._bytes[owner] = self._bytes.get(owner, 0) - sizes.pop(task.id, 0) + task.ByteSize()
        sizes[task.id] = task.ByteSize()
        while self._over(owner):
            oldest = next(iter(sizes))
            await self.delete(oldest, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._inner.get(task_id, context)

    async def list(
        self, params: a2a_pb2.ListTasksRequest, context: ServerCallContext
    ) -> a2a_pb2.ListTasksResponse:
        return await self._inner.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._inner.delete(task_id, context)
        owner = resolve_user_scope(context)
        sizes = self._sizes.get(owner)
        if sizes is None or task_id not in sizes:
            return
        self._bytes[owner] -= sizes.pop(task_id)
        if not sizes:
            del self._sizes[owner], self._bytes[owner]
