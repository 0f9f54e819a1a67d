"""Idempotency keys: which request a caller's key stands for, what it started, its outcome.

The server (``mail.server.idempotency``) keeps one :class:`KeyRecord` per caller and
``Idempotency-Key``. A record is *taken* (written and committed) before the work it guards
starts, with what that work is (``subject``: a task id, plus route data in ``context``);
it is *finished* with the outcome (status, content type, body) before the answer leaves.
Every write here is durable when it returns, like the team store's (not write-behind): a
key that was taken is what lets a retry after a crash find the work instead of redoing it.

Three implementations: :class:`MemoryIdempotencyStore` (this module; ``--store memory``,
nothing survives a restart), ``idempotency_sqlite.SqliteIdempotencyStore`` (the server's
SQLite file) and ``idempotency_postgres.PostgresIdempotencyStore`` (shared by every front
end of a cluster). Records are scoped by `InstanceKey` (swarm + caller) and expire at
``expires_at`` (seconds since the epoch); an expired record is treated as absent and is
deleted by `purge`.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field, replace
from typing import Any

from mail.store.base import InstanceKey, to_json

# The content type recorded as the outcome of a streamed answer, with no body: its key counts
# as answered (forgotten early at the caller's bound, like any answered key), and a repeat is
# answered from the work's own records (``POST /message``: the task's events), never replayed
# from the key.
STREAMED_OUTCOME = "text/event-stream"


@dataclass(slots=True)
class KeyRecord:
    fingerprint: str
    created_at: float
    expires_at: float
    subject: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    holder: str = ""
    # The outcome, once the request finished (None while it is under way).
    status: int | None = None
    content_type: str | None = None
    body: bytes | None = None

    @property
    def finished(self) -> bool:
        return self.status is not None

    @property
    def streamed(self) -> bool:
        """Its request was answered by a stream that ended (`STREAMED_OUTCOME`)."""
        return self.content_type == STREAMED_OUTCOME

    def live(self, now: float) -> bool:
        return self.expires_at > now


def take_row(scope: tuple[str, str, str], key: str, record: KeyRecord) -> tuple[Any, ...]:
    """A take's columns, as every store writes them: the caller's scope, the key, then the
    record's fingerprint, subject, context, holder, created_at and expires_at."""
    return (
        *scope,
        key,
        record.fingerprint,
        record.subject,
        context_text(record.context),
        record.holder,
        record.created_at,
        record.expires_at,
    )


# The context a keyed ``POST /message`` that starts a new task records with its key (no
# events seen, no answer yet), one per value of `stream`, made once: never changed (a route
# that records more builds its own). `context_text` has their JSON made once too.
FRESH_TASK_CONTEXTS: dict[bool, dict[str, Any]] = {
    stream: {"after": 0, "answer": None, "stream": stream} for stream in (False, True)
}
_FRESH_TEXTS = {id(context): to_json(context) for context in FRESH_TASK_CONTEXTS.values()}


def context_text(context: dict[str, Any]) -> str:
    """`to_json(context)`, made once for `FRESH_TASK_CONTEXTS` (a keyed request's hot path)."""
    return _FRESH_TEXTS.get(id(context)) or to_json(context)


def load_context(text: str | None) -> dict[str, Any]:
    value = json.loads(text) if text else {}
    return value if isinstance(value, dict) else {}


class IdempotencyStore(abc.ABC):
    """Key records per (InstanceKey, key); every write is committed when it returns."""

    backend = "abstract"

    async def start(self) -> None:  # noqa: B027 - optional for stores without resources
        """Open what the store needs (connections, tables)."""

    async def close(self) -> None:  # noqa: B027 - optional for stores without resources
        """Release it. Idempotent."""

    @abc.abstractmethod
    async def get(self, scope: InstanceKey, key: str, now: float) -> KeyRecord | None:
        """The live record of `key`, or None (absent or expired)."""

    @abc.abstractmethod
    async def take(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        """Store `record` under `key` unless a live record holds it.

        Returns None when `record` was stored, else the live record that holds the key.
        An expired record is overwritten. With `replace`, so is a live one that is not
        finished and has the same fingerprint (a request taking over work whose first
        attempt died with its process); with `over` too, only the one created at `over`
        (the record the takeover found: another request that took it over since, in
        another process, keeps it).
        """

    async def take_with_work(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        """`take` for a request whose work is written to the task store right after (the
        SQLite server's key then commits with that work: `idempotency_sqlite_buffered`)."""
        return await self.take(scope, key, record, replace=replace, over=over)

    def take_now(self, scope: InstanceKey, key: str, record: KeyRecord) -> int:
        """`take_with_work` at once, when the store can tell with no await that the key is
        free and store it so (the SQLite server's buffered keys); False: nothing was done,
        the caller awaits `take_with_work`."""
        return self.take_fields_now(
            scope,
            key,
            record.fingerprint,
            record.subject,
            record.context,
            record.holder,
            record.created_at,
            record.expires_at,
        )

    def take_fields_now(
        self,
        scope: InstanceKey,
        key: str,
        fingerprint: str,
        subject: str | None,
        context: dict[str, Any],
        holder: str,
        created_at: float,
        expires_at: float,
    ) -> int:
        """`take_now` of the record these fields make (no record made: the keyed request's
        hot path, `Ticket.take`): 0 when nothing was done, else a positive mark that
        `written` tells about."""
        return 0

    def written(self, mark: int) -> bool:
        """Whether the key a `take_fields_now` that returned `mark` took is committed
        (False: `await settle(scope, key)`)."""
        return True

    async def settle(  # noqa: B027 - optional
        self, scope: InstanceKey | None = None, key: str | None = None
    ) -> None:
        """The keys taken with their work (`key` of `scope` alone when given) are committed:
        before an answer, a stream's first event or a duplicate's 409 names their task.
        Raises StoreUnavailableError when they cannot be (an outage); a no-op where every
        take commits on its own."""

    def settled(self, scope: InstanceKey, key: str) -> bool:
        """Whether `settle(scope, key)` has nothing to wait for (no await); True where every
        take commits on its own."""
        return True

    def let_go(self, scope: InstanceKey, key: str) -> None:  # noqa: B027 - optional
        """The request that took `key` is over here (answered, streamed, or refused)."""

    @abc.abstractmethod
    async def finish(
        self, scope: InstanceKey, key: str, status: int, content_type: str | None, body: bytes
    ) -> None:
        """Record the outcome of the request that took `key`."""

    async def finish_many(
        self, outcomes: list[tuple[InstanceKey, str, int, str | None, bytes]]
    ) -> None:
        """`finish` for several keys (scope, key, status, content type, body) at once."""
        for scope, key, status, content_type, body in outcomes:
            await self.finish(scope, key, status, content_type, body)

    @abc.abstractmethod
    async def release(self, scope: InstanceKey, key: str) -> None:
        """Forget `key` (its request ended before doing anything: a retry may run it)."""

    @abc.abstractmethod
    async def count(self, scope: InstanceKey, now: float) -> int:
        """Live records of one caller."""

    @abc.abstractmethod
    async def purge(self, now: float, scope: InstanceKey | None = None) -> int:
        """Delete expired records (of one caller, or of everyone); returns how many."""

    @abc.abstractmethod
    async def evict_finished(self, scope: InstanceKey, count: int) -> int:
        """Delete one caller's `count` oldest finished records (their requests answered; the
        caller is at its bound and needs room); returns how many."""


class MemoryIdempotencyStore(IdempotencyStore):
    """In this process only: what a server with ``--store memory`` keeps."""

    backend = "memory"

    def __init__(self) -> None:
        self._records: dict[InstanceKey, dict[str, KeyRecord]] = {}

    async def get(self, scope: InstanceKey, key: str, now: float) -> KeyRecord | None:
        record = self._records.get(scope, {}).get(key)
        return record if record is not None and record.live(now) else None

    async def take(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        records = self._records.setdefault(scope, {})
        held = records.get(key)
        if held is not None and held.live(record.created_at):
            takeover = (
                replace
                and not held.finished
                and held.fingerprint == record.fingerprint
                and (over is None or held.created_at == over)
            )
            if not takeover:
                return held
        records[key] = record
        return None

    async def finish(
        self, scope: InstanceKey, key: str, status: int, content_type: str | None, body: bytes
    ) -> None:
        held = self._records.get(scope, {}).get(key)
        if held is not None:
            self._records[scope][key] = replace(
                held, status=status, content_type=content_type, body=bytes(body)
            )

    async def release(self, scope: InstanceKey, key: str) -> None:
        records = self._records.get(scope)
        if records is not None:
            records.pop(key, None)
            if not records:
                del self._records[scope]

    async def count(self, scope: InstanceKey, now: float) -> int:
        return sum(1 for r in self._records.get(scope, {}).values() if r.live(now))

    async def evict_finished(self, scope: InstanceKey, count: int) -> int:
        records = self._records.get(scope, {})
        finished = sorted((r.created_at, k) for k, r in records.items() if r.finished)
        for _, key in finished[: max(count, 0)]:
            del records[key]
        return min(len(finished), max(count, 0))

    async def purge(self, now: float, scope: InstanceKey | None = None) -> int:
        removed = 0
        for owner in [scope] if scope is not None else list(self._records):
            records = self._records.get(owner)
            if records is None:
                continue
            for key in [k for k, r in records.items() if not r.live(now)]:
                del records[key]
                removed += 1
            if not records:
                del self._records[owner]
        return removed
