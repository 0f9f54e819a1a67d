"""The runtime's agent histories: a dict keyed ``"<task_id>::<agent_name>"`` (v1.3's shape,
public as ``runtime.agent_histories``) that also knows which agents have a history on each
task, so what is done per task (measuring a finished task, letting it go) looks up that
task's few keys instead of scanning every history the runtime holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

History = list[dict[str, Any]]
SEPARATOR = "::"

_MISSING: Any = object()


def _task_of(key: str) -> tuple[str, str] | None:
    task_id, sep, agent = key.partition(SEPARATOR)
    return (task_id, agent) if sep else None


class AgentHistories(dict[str, History]):
    """``dict[str, History]`` with a per-task index of its keys."""

    __slots__ = ("_by_task",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._by_task: dict[str, dict[str, None]] = {}
        self.update(*args, **kwargs)

    # -- the index ---------------------------------------------------------------------------
    def _added(self, key: str) -> None:
        parts = _task_of(key) if isinstance(key, str) else None
        if parts is not None:
            self._by_task.setdefault(parts[0], {})[parts[1]] = None

    def _removed(self, key: str) -> None:
        parts = _task_of(key) if isinstance(key, str) else None
        if parts is None:
            return
        agents = self._by_task.get(parts[0])
        if agents is not None:
            agents.pop(parts[1], None)
            if not agents:
                del self._by_task[parts[0]]

    def agents_of(self, task_id: str) -> list[str]:
        """The agents with a history on this task, in the order they gained one."""
        return list(self._by_task.get(task_id, ()))

    def of_task(self, task_id: str) -> list[tuple[str, History]]:
        """(key, history) of each agent's history on this task."""
        prefix = task_id + SEPARATOR
        return [(prefix + agent, self[prefix + agent]) for agent in self.agents_of(task_id)]

    def drop_task(self, task_id: str) -> None:
        """Remove every history of this task."""
        prefix = task_id + SEPARATOR
        for agent in self._by_task.pop(task_id, {}):
            super().pop(prefix + agent, None)

    # -- dict's ways to add or remove keys ---------------------------------------------------
    def __setitem__(self, key: str, value: History) -> None:
        if key not in self:
            self._added(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._removed(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self._added(key)
        return super().setdefault(key, default)

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        if key in self:
            self._removed(key)
            return super().pop(key)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def popitem(self) -> tuple[str, History]:
        key, value = super().popitem()
        self._removed(key)
        return key, value

    def clear(self) -> None:
        super().clear()
        self._by_task.clear()

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        items: Iterable[tuple[str, History]]
        for source in (*args, kwargs):
            if isinstance(source, Mapping):
                items = source.items()
            elif hasattr(source, "keys"):
                items = ((k, source[k]) for k in source.keys())  # noqa: SIM118 - keys() protocol
            else:
                items = source
            for key, value in items:
                self[key] = value

    def __ior__(self, other: Any) -> AgentHistories:  # type: ignore[override, misc]
        self.update(other)
        return self

    def __reduce__(self) -> Any:  # pickled (cluster mode, copies) as the same type
        return (type(self), (dict(self),))
