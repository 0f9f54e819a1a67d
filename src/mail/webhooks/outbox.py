"""The outbox rows one instance writes with the events that cause them."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from mail.core.events import TaskEvent
from mail.core.observer import RuntimeObserver
from mail.core.tasks import MAILTask
from mail.store.base import InstanceKey
from mail.store.webhooks import Record, new_id
from mail.webhooks import events as ev
from mail.webhooks.interest import SubscriptionInterest

# (event_id, task_id, event_type, payload, created_at): what sql_batch.outbox_item takes.
OutboxRow = tuple[str, str, str, str, float]


class InstanceOutbox:
    """Outbox rows of one swarm instance (its key: swarm, caller kind, caller id)."""

    def __init__(
        self,
        key: InstanceKey,
        summary_chars: int,
        engine: Any,
        interest: SubscriptionInterest | None = None,
    ) -> None:
        self.key = key
        self.summary_chars = summary_chars
        self.engine = engine
        # None: every pushed event gets its row (servers sharing a database).
        self.interest = interest
        self._owner = (key.caller_role, key.caller_id)

    def _row(
        self,
        event_type: str,
        task_id: str,
        summary: str,
        state: str | None,
        detail: Mapping[str, Any],
    ) -> OutboxRow:
        now = time.time()
        event_id = new_id("evt")
        body = ev.payload(
            event_type,
            event_id=event_id,
            occurred_at=now,
            task_id=task_id,
            caller=(self.key.caller_role, self.key.caller_id),
            swarm=self.key.swarm_name,
            summary=summary,
            summary_chars=self.summary_chars,
            state=state,
            detail=detail,
        )
        return (event_id, task_id, event_type, body, now)

    def rows_for_event(self, task: MAILTask, event: TaskEvent) -> list[OutboxRow]:
        event_type = ev.event_type_of(event.event)
        if event_type is None or task.task_id == "*":
            return []
        interest = self.interest
        if interest is not None and not interest.wants(self._owner, task.task_id, event_type):
            return []
        text = str(event.description or "")
        detail = ev.event_detail(event_type, event.extra_data)
        return [self._row(event_type, task.task_id, text, task.state.value, detail)]

    def rows_for_answer(
        self, task_id: str, task: MAILTask | None, response: Mapping[str, Any]
    ) -> list[OutboxRow]:
        if task_id == "*":
            return []
        interest = self.interest
        if interest is not None and not interest.watches(self._owner, task_id):
            return []
        event_type, summary, detail = ev.answer_detail(response)
        if interest is not None and not interest.wants(self._owner, task_id, event_type):
            return []
        state = task.state.value if task is not None else None
        return [self._row(event_type, task_id, summary, state, detail)]

    def record(self, rows: list[OutboxRow]) -> None:
        """Rows of a server whose task store does not write them (kept by the engine)."""
        self.engine.record_events([self.as_record(row) for row in rows])

    def as_record(self, row: OutboxRow) -> Record:
        event_id, task_id, event_type, body, created_at = row
        return {
            "event_id": event_id,
            "swarm_name": self.key.swarm_name,
            "caller_role": self.key.caller_role,
            "caller_id": self.key.caller_id,
            "task_id": task_id,
            "event_type": event_type,
            "payload": body,
            "created_at": created_at,
        }

    def kick(self) -> None:
        """Rows were queued in the task store: deliver once they are committed."""
        self.engine.kick(flush=True)


class OutboxObserver(RuntimeObserver):
    """An instance's observer when there is no task store: outbox rows only."""

    def __init__(self, outbox: InstanceOutbox, runtime: Any) -> None:
        self.outbox = outbox
        self.runtime = runtime

    def event_added(self, task: MAILTask, event: TaskEvent) -> None:
        rows = self.outbox.rows_for_event(task, event)
        if rows:
            self.outbox.record(rows)

    def response_set(self, task_id: str, response: dict[str, Any]) -> None:
        task = self.runtime.mail_tasks.get(task_id)
        rows = self.outbox.rows_for_answer(task_id, task, response)
        if rows:
            self.outbox.record(rows)
