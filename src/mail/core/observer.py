"""Hooks the runtime calls when durable state changes (persistence plugs in here)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from mail.core.events import TaskEvent
from mail.core.tasks import MAILTask


class RuntimeObserver:
    """No-op base; subclasses override what they need."""

    def task_changed(self, task: MAILTask) -> None:
        """A task was created or its state (running/completed/contributors) changed."""

    def event_added(self, task: MAILTask, event: TaskEvent) -> None:
        """An event was appended to a task."""

    def history_changed(
        self, task_id: str, agent_name: str, tool_format: str, history: list[dict[str, Any]]
    ) -> None:
        """An agent's history for a task reached a consistent point (end of a turn)."""

    def response_set(self, task_id: str, response: dict[str, Any]) -> None:
        """A task produced its final response."""

    def queue_stashed(self, task_id: str, items: list[dict[str, Any]]) -> None:
        """A paused/completed task's queued messages were stashed (empty list = cleared)."""

    def room(self) -> Awaitable[object] | None:
        """None while the observer keeps up; otherwise something to await before an agent's
        next turn: its writes are waiting for the store (a database outage filled the
        store's queue), and more turns would only make them wait in memory."""
        return None

    def committed(self) -> Awaitable[object] | None:
        """None, or something an agent's model call awaits first: the commit of what the
        instance's earlier steps wrote (a crash then loses only the step in flight)."""
        return None
