"""Persistence of team messaging: threads, their posts, agent inboxes and attachments."""

from __future__ import annotations

import abc
import datetime as _dt
import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
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


def inbox_rows(key: InstanceKey, entries: Iterable[Record]) -> list[tuple[Any, ...]]:
    """`team_inbox` rows of new entries, in the column order both SQL stores insert:
    key, agent_name, entry_id, thread_id, ts, is_read, shown, record."""
    k = key_tuple(key)
    return [
        (
            *k,
            e["agent"],
            e["entry_id"],
            e.get("thread_id"),
            e["timestamp"],
            bool(e.get("read")),
            bool(e.get("shown")),
            dump_record(e),
        )
        for e in entries
    ]


def unread_from_rows(rows: Iterable[Any]) -> dict[str, dict[str, int]]:
    """`unread_counts` from rows of (agent_name, place, n)."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        counts.setdefault(r["agent_name"], {})[r["place"]] = int(r["n"])
    return counts


def key_clause(mark: str) -> str:
    """The instance key condition with numbered parameters 1-3 (`$` PostgreSQL, `?` SQLite)."""
    return f"swarm_name = {mark}1 AND caller_role = {mark}2 AND caller_id = {mark}3"


def trim_sql(table: str, column: str, mark: str) -> str:
    """Keep the newest rows of one thread / one agent: parameters
    1-3 the key, 4 the thread or agent, 5 how many to keep."""
    where = f"{key_clause(mark)} AND {column} = {mark}4"
    return (
        f"DELETE FROM {table} WHERE {where} AND seq <= ("
        f"SELECT seq FROM {table} WHERE {where} ORDER BY seq DESC LIMIT 1 OFFSET {mark}5)"
    )


@dataclass(frozen=True, slots=True)
class InboxQuery:
    """Which of an agent's inbox entries `TeamStore.inbox` returns, and in which order."""

    thread_id: str | None = None
    since: str | None = None  # only entries after it (ISO 8601 timestamps compare as text)
    limit: int | None = None
    unshown_only: bool = False
    unread_only: bool = False
    entry_id: str | None = None
    oldest_first: bool = False  # oldest first instead (the limit then keeps the oldest)

    def matches(self, entry: Record) -> bool:
        return (
            (self.thread_id is None or entry.get("thread_id") == self.thread_id)
            and (self.since is None or entry["timestamp"] > self.since)
            and not (self.unshown_only and entry.get("shown"))
            and not (self.unread_only and entry.get("read"))
            and (self.entry_id is None or entry["entry_id"] == self.entry_id)
        )


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

    def status(self) -> dict[str, Any]:
        """Whether writes are failing (and why), for the server's health reporting."""
        writes = getattr(self, "writes", None)  # the SQL stores' RetryingWrites
        if writes is None:
            return {"degraded": False, "last_error": None, "pending_writes": 0}
        status: dict[str, Any] = writes.status()
        return status

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
        return await self.select_inbox(
            key,
            agent,
            InboxQuery(thread_id, since, limit, unshown_only, unread_only, entry_id, oldest_first),
        )

    @abc.abstractmethod
    async def select_inbox(self, key: InstanceKey, agent: str, query: InboxQuery) -> list[Record]:
        """`inbox` with its filters in one value."""

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

    # -- lifecycle (mail.store.lifecycle) ---------------------------------------------
    async def stored_bytes(self, key: InstanceKey) -> int:
        """Bytes this instance keeps here: records of threads, posts and inbox entries, and
        attachments (the per-caller storage quota counts them with the caller's tasks)."""
        return await self.attachment_bytes(key)

    async def prune_before(
        self, cutoff: _dt.datetime, live_tasks: Collection[tuple[InstanceKey, str]] = ()
    ) -> int:
        """Remove what is older than `cutoff` (retention), in small batches; returns the rows
        removed: posts, inbox entries and attachments by their own time, then threads that
        have not changed since and have no posts left.

        Posts, inbox entries and attachments of a task that still runs or waits (a
        breakpoint, a review) stay, whatever their age. The stores find those tasks in their
        task table; a server without one (`--store memory`) names them (`live_tasks`:
        (instance, task id))."""
        return 0


# Rows a team prune removes per statement (one transaction each).
TEAM_PRUNE_BATCH = 500


def cutoff_text(cutoff: _dt.datetime) -> str:
    """A cutoff as the ISO 8601 UTC text the team records hold (they compare as text)."""
    return cutoff.astimezone(_dt.UTC).isoformat()
