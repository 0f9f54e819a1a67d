"""What an A2A peer sends while it works, turned into MAIL task events."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

# States after which an A2A task's stream has nothing more to say for this call: the final
# ones, and the interrupted ones (the peer waits for the sender).
FINAL_STATES = ("completed", "failed", "canceled", "rejected", "input-required", "auth-required")

Progress = tuple[str, dict[str, Any]]  # (description, extra_data) of one event


@dataclass(frozen=True)
class UpdateLimits:
    max_updates: int = 100  # updates shown as events per call (0: none)
    max_chars: int = 2000  # characters of an update's text kept in its event (0: none)


def state_name(state: int) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required`` (the A2A specification's spelling)."""
    from a2a.types.a2a_pb2 import TaskState

    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")  # type: ignore[arg-type]


@functools.cache
def _final_state_values() -> frozenset[int]:
    from a2a.types.a2a_pb2 import TaskState

    return frozenset(v for v in TaskState.values() if state_name(v) in FINAL_STATES)


def clip(text: str, limit: int) -> tuple[str, bool]:
    """At most ``limit`` characters of ``text``, and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[:limit], True)


def clip_reason(text: str, limit: int) -> str:
    """A peer's error or failure text, cut to ``limit`` characters (saying so) for a message."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}... (cut from {len(text)} characters: "
        f"[server.settings] max_a2a_peer_update_chars = {limit})"
    )


class PeerTaskFeed:
    """The events of one call to an A2A peer, and the task or message they add up to."""

    def __init__(self, agent: str, limits: UpdateLimits) -> None:
        self.agent = agent  # "<agent>@<peer>", as the MAIL sender addressed it
        self.limits = limits
        self.task: Any = None  # a2a Task, built up from the events
        self.message: Any = None  # a2a Message, when the peer answered with one
        self.updates = 0
        self.dropped = 0

    @property
    def finished(self) -> bool:
        """Whether the peer has answered: a message, or its task in one of ``FINAL_STATES``."""
        if self.message is not None:
            return True
        return self.task is not None and self.task.status.state in _final_state_values()

    def add(self, event: Any) -> Progress | None:
        """Take one ``StreamResponse``; the event to emit for it, if any."""
        from a2a.types.a2a_pb2 import Task

        kind = event.WhichOneof("payload")
        if kind == "message":
            self.message = event.message
            return None
        if kind == "task":
            if self._mine(event.task.id):
                self.task = Task()
                self.task.CopyFrom(event.task)
            return None
        if kind == "status_update":
            update = event.status_update
            if not self._mine(update.task_id):
                return None
            self._task_of(update).status.CopyFrom(update.status)
            return self._count(self._status_progress(update))
        if kind == "artifact_update":
            from a2a.server.tasks.task_manager import append_artifact_to_task

            update = event.artifact_update
            if not self._mine(update.task_id):
                return None
            append_artifact_to_task(self._task_of(update), update)
            return self._count(self._artifact_progress(update))
        return None

    def overflow(self) -> Progress | None:
        """One event saying how many updates were not shown, when some were not."""
        if not self.dropped:
            return None
        limit = self.limits.max_updates
        return (
            f"A2A agent {self.agent}: {self.dropped} more updates not shown "
            f"([server.settings] max_a2a_peer_updates = {limit})",
            {"agent": self.agent, "kind": "overflow", "not_shown": self.dropped},
        )

    # -- building blocks -------------------------------------------------------------------
    def _mine(self, task_id: str) -> bool:
        """Whether an event about ``task_id`` is about this call's task (the first one named)."""
        return self.task is None or not self.task.id or not task_id or task_id == self.task.id

    def _task_of(self, update: Any) -> Any:
        from a2a.types.a2a_pb2 import Task

        if self.task is None:  # a stream need not start with the task itself
            self.task = Task(id=update.task_id, context_id=update.context_id)
        return self.task

    def _count(self, progress: Progress) -> Progress | None:
        self.updates += 1
        if self.updates > self.limits.max_updates:
            self.dropped += 1
            return None
        progress[1]["update"] = self.updates
        return progress

    def _put(self, extra: dict[str, Any], key: str, value: str) -> str:
        """``extra[key] = value``, cut to ``max_chars`` (then ``truncated``); the value kept."""
        kept, cut = clip(value, self.limits.max_chars)
        if cut:
            extra["truncated"] = True
        extra[key] = kept
        return kept

    def _status_progress(self, update: Any) -> Progress:
        from a2a.helpers.proto_helpers import get_message_text

        state = state_name(update.status.state)
        extra: dict[str, Any] = {"agent": self.agent, "kind": "status"}
        self._put(extra, "a2a_task_id", update.task_id)
        extra["state"] = state
        said = get_message_text(update.status.message) if update.status.HasField("message") else ""
        text = self._put(extra, "text", said)
        return f"A2A agent {self.agent}: {state}" + (f": {text}" if text else ""), extra

    def _artifact_progress(self, update: Any) -> Progress:
        from a2a.helpers.proto_helpers import get_artifact_text

        artifact = update.artifact
        extra: dict[str, Any] = {"agent": self.agent, "kind": "artifact"}
        self._put(extra, "a2a_task_id", update.task_id)
        artifact_id = self._put(extra, "artifact_id", artifact.artifact_id)
        name = self._put(extra, "artifact_name", artifact.name) or artifact_id
        extra["append"] = update.append
        extra["last_chunk"] = update.last_chunk
        text = self._put(extra, "text", get_artifact_text(artifact))
        verb = "appended to" if update.append else "artifact"
        return f"A2A agent {self.agent}: {verb} {name}: {text}", extra
