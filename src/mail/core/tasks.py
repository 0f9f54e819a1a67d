"""MAILTask: the record of one task (owner, contributors, events, stashed queue, state)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from mail.core.events import TaskEvent


class MAILTask:
    """State of one task inside one runtime instance."""

    def __init__(
        self,
        task_id: str,
        task_owner: str,
        task_contributors: list[str] | None = None,
        *,
        start_time: datetime.datetime | None = None,
    ) -> None:
        self.task_id = task_id
        self.task_owner = task_owner
        self.task_contributors: list[str] = list(task_contributors or [task_owner])
        if task_owner not in self.task_contributors:
            self.task_contributors.insert(0, task_owner)
        self.start_time = start_time or datetime.datetime.now(datetime.UTC)
        self.events: list[TaskEvent] = []
        self.is_running = True
        self.completed = False
        self.task_message_queue: list[dict[str, Any]] = []
        self.remote_swarms: set[str] = set()
        self.title: str | None = None
        self.response: dict[str, Any] | None = None
        # Action review (mail.core.runtime_review): held calls as callers see them, and the
        # reviewer's own state (the calls, decided ids) so both survive a restart.
        self.pending_reviews: list[dict[str, Any]] = []
        self.review_state: dict[str, Any] = {}
        self._event_signal: asyncio.Event | None = None

    # -- state --------------------------------------------------------------------------
    def mark_complete(self) -> None:
        self.completed = True
        self.is_running = False

    def resume(self) -> None:
        self.completed = False
        self.is_running = True

    def queue_stash(self, items: list[dict[str, Any]]) -> None:
        self.task_message_queue.extend(items)

    def queue_take(self) -> list[dict[str, Any]]:
        items, self.task_message_queue = self.task_message_queue, []
        return items

    def add_contributor(self, contributor: str) -> None:
        if contributor not in self.task_contributors:
            self.task_contributors.append(contributor)

    # -- events -------------------------------------------------------------------------
    def add_event(self, event: TaskEvent) -> None:
        event.id = str(len(self.events) + 1)
        self.events.append(event)
        self.wake()

    def wake(self) -> None:
        """Wake whoever waits on `event_signal` (a new event, or the task finished)."""
        signal, self._event_signal = self._event_signal, None
        if signal is not None:
            signal.set()

    def event_signal(self) -> asyncio.Event:
        """An event that is set as soon as the next task event is added (or on `wake`)."""
        if self._event_signal is None:
            self._event_signal = asyncio.Event()
        return self._event_signal

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self, include_events: bool = True) -> dict[str, Any]:
        record: dict[str, Any] = {
            "task_id": self.task_id,
            "task_owner": self.task_owner,
            "task_contributors": list(self.task_contributors),
            "start_time": self.start_time.isoformat(),
            "is_running": self.is_running,
            "completed": self.completed,
            "remote_swarms": sorted(self.remote_swarms),
            "title": self.title,
            "pending_reviews": list(self.pending_reviews),
            "task_message_queue": [
                {"priority": i["priority"], "seq": i["seq"], "message": i["message"]}
                for i in self.task_message_queue
            ],
        }
        if include_events:
            record["events"] = [e.to_record() for e in self.events]
        return record

    def to_store_record(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task_owner": self.task_owner,
            "task_contributors": list(self.task_contributors),
            "remote_swarms": sorted(self.remote_swarms),
            "is_running": self.is_running,
            "completed": self.completed,
            "title": self.title,
            "start_time": self.start_time.isoformat(),
            "pending_reviews": list(self.pending_reviews),
            "review_state": dict(self.review_state),
        }

    @classmethod
    def from_store_record(cls, record: dict[str, Any]) -> MAILTask:
        start = record.get("start_time")
        task = cls(
            record["task_id"],
            record["task_owner"],
            list(record.get("task_contributors") or []),
            start_time=datetime.datetime.fromisoformat(start) if isinstance(start, str) else start,
        )
        task.remote_swarms = set(record.get("remote_swarms") or [])
        task.completed = bool(record.get("completed"))
        task.is_running = bool(record.get("is_running", not task.completed))
        task.title = record.get("title")
        task.pending_reviews = list(record.get("pending_reviews") or [])
        task.review_state = dict(record.get("review_state") or {})
        return task
