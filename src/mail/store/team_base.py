"""Persistence of team messaging: threads, their posts, agent inboxes and attachments.

Like `TaskStore`, everything is scoped by an `InstanceKey` (one caller's swarm instance).
Unlike the task store's write-behind, every write here is durable when it returns: a thread
post or an attachment is something an agent was told succeeded, and must survive a crash.

Records are plain JSON-able dicts:

- thread: ``{thread_id, title, creator, participants: [..], created_at, updated_at}``
- post: ``{post_id, thread_id, sender, body, kind ("post"|"membership"), urgent, task_id,
  timestamp}``
- inbox entry: ``{entry_id, agent, kind ("direct"|"thread"|"reply"|"file"|"broadcast"),
  thread_id, sender, subject, body, task_id, timestamp, read, shown, attachments: [..]}``
  (``shown``: the agent has seen it, in a turn or a digest; ``read``: returned by
  get_messages)
- attachment: ``{attachment_id, filename, size, sha256, description, sender, recipients,
  task_id, created_at}`` plus the bytes.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable
from typing import Any

from mail.store.base import InstanceKey

Record = dict[str, Any]


def key_tuple(key: InstanceKey) -> tuple[str, str, str]:
    return (key.swarm_name, key.caller_role, key.caller_id)


def dump_record(value: Any) -> str:
    """A record as the SQL stores keep it: compact JSON without NUL characters."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("\\u0000", "")


def entry_from_row(row: Any) -> Record:
    """An inbox entry from a `team_inbox` row: the record with its read/shown columns."""
    record: Record = json.loads(row["record"])
    record["read"] = bool(row["is_read"])
    record["shown"] = bool(row["shown"])
    return record


class TeamStore(abc.ABC):
    """Threads, inboxes and attachments of swarm instances."""

    # Stored posts per thread and inbox entries per agent (per instance): past these the
    # oldest are dropped as new ones arrive ([server.team_tools] max_posts_per_thread /
    # max_inbox_entries). None keeps everything.
    max_posts_per_thread: int | None = None
    max_inbox_entries: int | None = None

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections / prepare tables."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Idempotent."""

    # -- threads ---------------------------------------------------------------------
    @abc.abstractmethod
    async def save_thread(self, key: InstanceKey, thread: Record) -> None:
        """Create or replace a thread record (participants included)."""

    @abc.abstractmethod
    async def get_thread(self, key: InstanceKey, thread_id: str) -> Record | None: ...

    @abc.abstractmethod
    async def list_threads(self, key: InstanceKey | None) -> list[tuple[InstanceKey, Record]]:
        """Threads of one instance, or of every instance of every swarm when key is None."""

    async def count_threads(self, key: InstanceKey) -> int:
        """How many threads this instance has (the thread quota counts them)."""
        return len(await self.list_threads(key))

    @abc.abstractmethod
    async def add_post(self, key: InstanceKey, post: Record) -> None: ...

    @abc.abstractmethod
    async def thread_posts(
        self, key: InstanceKey, thread_id: str, limit: int | None = None
    ) -> list[Record]:
        """Posts of a thread, oldest first (the last `limit` when given)."""

    # -- inboxes ---------------------------------------------------------------------
    @abc.abstractmethod
    async def add_inbox_entries(self, key: InstanceKey, entries: Iterable[Record]) -> None: ...

    @abc.abstractmethod
    async def inbox(
        self,
        key: InstanceKey,
        agent: str,
        *,
        thread_id: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        unshown_only: bool = False,
        unread_only: bool = False,
        entry_id: str | None = None,
        oldest_first: bool = False,
    ) -> list[Record]:
        """An agent's entries, most recent first (oldest first with `oldest_first`; the
        `limit` then keeps the oldest). Timestamps compare as ISO 8601 text."""

    @abc.abstractmethod
    async def mark(
        self, key: InstanceKey, agent: str, entry_ids: Iterable[str], *, field: str
    ) -> None:
        """Set `field` ("read" or "shown") to true on these entries of `agent`."""

    @abc.abstractmethod
    async def unread_counts(
        self, key: InstanceKey, thread_id: str | None = None
    ) -> dict[str, dict[str, int]]:
        """agent -> {thread_id or "direct": unread count}; one thread only when given."""

    # -- attachments -----------------------------------------------------------------
    @abc.abstractmethod
    async def put_attachment(self, key: InstanceKey, record: Record, data: bytes) -> None: ...

    @abc.abstractmethod
    async def attachment_bytes(self, key: InstanceKey) -> int:
        """Total size of this instance's attachments (the attachment quota counts them)."""

    @abc.abstractmethod
    async def get_attachment(
        self, key: InstanceKey, attachment_id: str, *, with_data: bool = True
    ) -> tuple[Record, bytes] | None:
        """(record, bytes) of an attachment of this instance; bytes are b"" without data."""
