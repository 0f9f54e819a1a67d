"""SQLite keys of ``POST /message`` committed with the task they start: no commit of their own.

A `mail server` on SQLite is the only process on its database file (`ProcessLock`), so
whether one of its callers' keys is taken is known here: each caller's keys are read once
(its first keyed request, and again after each sweep of expired keys) into a table of their
fingerprints (`KeyFilter`), and every key this process takes afterwards is added to it. A key
the table does not have is free, with no statement at all; one it has (a retry, or a key
with another's fingerprint: about one in 400,000 at 10,000 keys) is read from the file.

Such a key's row (`KEY_ROW_KIND`) then rides with the task store's write-behind buffer (a
rider, `WriteBehindBuffer.put_rider`): it is written with the next batch cut, in the same
transaction as, or before, the writes that create or continue its task, which the route makes
right after; the key rows of one batch are one write of the buffer (where a queued write each
passed through every step of a batch on its own). So after a kill -9 the file has the key
and the task's first writes, or the key alone, or neither; never the task without its key.
(A rider may be written ahead of writes queued before it: none of them touches its key, as
the caller's filter says the key is new.) "Acknowledged means
stored" holds as for the task: a plain answer and a stream's first event wait until the
task store committed what was written before them, the key included, and so does the
answer to a duplicate that arrives while the first request is under way (`settle`). A retry
after a crash finds the key with its task (answered from the task: `mail.server.message_replay`), or the
key alone (its task never got the message: the retry runs it under the same task id), or
nothing (nothing was told, nothing reached the store: the retry runs as a first request).

The outcome (status, body) goes into the same buffer later, written whole with the key's row
(an upsert of every column: the rows of one key are applied in their order, whatever else
the batch holds). A key the filter has is read from the file after the buffer is flushed,
as is everything else this store does (counts at the per-caller bound, evictions, sweeps,
outcomes of keys it did not take): those run on the file as `SqliteIdempotencyStore` does,
once what the buffer holds is committed before them.

Only takes that ask for it (`take_with_work`, which ``POST /message`` uses when its work is
nothing but the task: no webhook, no upload) go this way; every other route's key is
committed on its own before its work starts, as before.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
from array import array
from collections.abc import Callable
from typing import Any

from mail.store.base import InstanceKey, StoreUnavailableError
from mail.store.idempotency import KeyRecord, context_text, take_row
from mail.store.idempotency_schema import TABLE
from mail.store.idempotency_sqlite import SqliteIdempotencyStore
from mail.store.sql_base import KEY_ROW_KIND, SqlWrite

# The task store's write kind of a key row is `KEY_ROW_KIND` (`mail.store.sqlite` runs
# `KEY_ROW_SQL` for it; `one_task_queued` counts it as its task's).
# A key row, written whole: the take's decision was made in memory; this stores it.
KEY_ROW_SQL = f"""
    INSERT INTO {TABLE} (swarm_name, caller_role, caller_id, idem_key, fingerprint, subject,
                         context, holder, created_at, expires_at, status, content_type, body)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (swarm_name, caller_role, caller_id, idem_key) DO UPDATE SET
        fingerprint = excluded.fingerprint, subject = excluded.subject,
        context = excluded.context, holder = excluded.holder,
        created_at = excluded.created_at, expires_at = excluded.expires_at,
        status = excluded.status, content_type = excluded.content_type, body = excluded.body
"""
# A take's key row, with no outcome yet: its 10 leading columns alone (the outcome's three
# are NULL by default, and an earlier row's are cleared: `KEY_ROW_SQL`'s update). Bound
# values cost: in the server, three NULLs fewer are some 1.5 us less per keyed request.
TAKE_ROW_SQL = KEY_ROW_SQL.replace(", status, content_type, body)", ")").replace(
    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?", "?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
)
TAKE_ROW_COLUMNS = 10


def key_row_statements(rows: list[tuple[Any, ...]]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """A batch's key rows as (statement, rows) for executemany, in their order: the rows of
    a take (`TAKE_ROW_COLUMNS` long) by `TAKE_ROW_SQL`, those with an outcome by
    `KEY_ROW_SQL` (a run of each, one after the other: a key's take and outcome in one batch
    keep their order)."""
    runs: list[tuple[str, list[tuple[Any, ...]]]] = []
    for row in rows:
        sql = TAKE_ROW_SQL if len(row) == TAKE_ROW_COLUMNS else KEY_ROW_SQL
        if runs and runs[-1][0] is sql:
            runs[-1][1].append(row)
        else:
            runs.append((sql, [row]))
    return runs


# Every key of a caller, expired ones too (until swept): a key the filter has is looked up on
# the file, so one too many costs a read, and no clock is compared here.
_LOAD = f"SELECT idem_key FROM {TABLE} WHERE swarm_name = ? AND caller_role = ? AND caller_id = ?"
# Whether key row `k` is finished: of other routes, with an outcome; of ``POST /message``
# (whose key names its task), with an outcome or without, once its task is not running (a
# dropped stream's key has one while its task runs). The tasks table's unique index leads
# with task_id: one probe per key with a task.
_IS_FINISHED = """(CASE WHEN k.subject IS NULL THEN k.status IS NOT NULL ELSE NOT EXISTS (
          SELECT 1 FROM tasks AS t WHERE t.task_id = k.subject AND t.swarm_name = ?1
             AND t.caller_role = ?2 AND t.caller_id = ?3 AND t.is_running != 0) END)"""
# A caller's oldest finished keys, all of its keys read (and probed) to find them.
_FINISHED = f"""
    SELECT k.rowid, k.idem_key FROM {TABLE} AS k
    WHERE k.swarm_name = ?1 AND k.caller_role = ?2 AND k.caller_id = ?3 AND {_IS_FINISHED}
    ORDER BY k.created_at LIMIT ?4
"""
# The same among the caller's ?5 oldest keys only: the sort carries the rowid alone, and the
# tasks table is probed for those keys, not for all of them. At the default bound (1,266 of
# 10,000 keys, finding 1,000) 6.1 ms against 11.8 for `_FINISHED` on a copy of bench/http.py's
# database at the bound. The same keys as `_FINISHED` whenever the ?5 oldest hold enough
# finished ones (each older key is among them), by `created_at` (a key taken again after it
# expired, or taken over after a crash, keeps its row but is as old as that take).
_FINISHED_OLDEST = f"""
    WITH oldest AS (
        SELECT rowid AS r FROM {TABLE}
        WHERE swarm_name = ?1 AND caller_role = ?2 AND caller_id = ?3
        ORDER BY created_at LIMIT ?5)
    SELECT k.rowid, k.idem_key FROM oldest JOIN {TABLE} AS k ON k.rowid = oldest.r
    WHERE {_IS_FINISHED}
    ORDER BY k.created_at LIMIT ?4
"""
# A caller's keys counted in its key index alone, expired ones too: right after the caller's
# expired keys were removed (`purge`), 0.3 ms at the bound against 4.4 for reading every row.
_COUNT_ALL = (
    f"SELECT count(*) FROM {TABLE} WHERE swarm_name = ? AND caller_role = ? AND caller_id = ?"
)
_FORGET = f"DELETE FROM {TABLE} WHERE rowid = ?"
# Seconds a read waits for the task store's buffer to be committed before it.
FLUSH_TIMEOUT = 30.0

Scope = tuple[str, str, str]
# A key taken through the buffer: its row and the buffer's count of accepted writes once the
# row was in (None: unknown).
Taken = tuple[tuple[Any, ...], int | None]


def _fingerprint(key: str) -> int:
    """The low 32 bits of the key's string hash (per process: a `KeyFilter` is never stored,
    it is read again from the file at each start), never 0 (an empty slot): both the key's
    fingerprint and, masked, its first slot."""
    return (hash(key) & 0xFFFF_FFFF) or 1


class KeyFilter:
    """A caller's keys as 32-bit fingerprints in an open-addressed table (linear probing).

    "Absent" is certain. "Present" is wrong only for a key with another key's fingerprint:
    about one lookup in 400,000 at 10,000 keys (that key is then read from the file). The
    table doubles itself from the fingerprints it holds once half full: 4 bytes a slot, 8
    to 16 bytes a key (a set of the keys held 140), 1 kB at least. Keys forgotten on the file
    (evicted at the caller's bound, expired) stay in it, so past `limit` keys (twice what was
    read, 8,192 at least) `full` asks for a new one, read again from the file: one caller's
    table stays within some 256 kB at the default bound of 10,000 keys. (A Bloom filter
    before it held 3 bytes a key but said "present" for ~1% of new keys near full, and was
    read again each time it filled: each of those made a keyed request wait for the task
    store's batch and read the file on its thread, 2 to 3% more server CPU per keyed
    request in `bench/http.py`.)
    """

    __slots__ = ("count", "limit", "mask", "slots")
    MIN_SLOTS = 256
    MIN_LIMIT = 8192

    def __init__(self, keys: list[str]) -> None:
        size = self.MIN_SLOTS
        while size < 2 * len(keys):
            size *= 2
        self.slots = array("I", bytes(4 * size))
        self.mask = size - 1
        self.count = 0
        self.limit = max(2 * len(keys), self.MIN_LIMIT)
        for key in keys:
            self.add(key)

    def add(self, key: str) -> bool:
        """Add `key`; whether the table may have had it already (what `in` would have said),
        in one pass: the keyed request's hot path asks and adds at once (`_fingerprint` and
        `_spot`, inline)."""
        print_ = (hash(key) & 0xFFFF_FFFF) or 1
        slots = self.slots
        mask = self.mask
        spot = print_ & mask
        while True:
            seen = slots[spot]
            if seen == print_:
                return True
            if not seen:
                break
            spot = (spot + 1) & mask
        slots[spot] = print_
        self.count += 1
        if 2 * self.count > mask:
            self._grow()
        return False

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and bool(self.slots[self._spot(_fingerprint(key))])

    def _spot(self, print_: int) -> int:
        """The slot holding `print_`, or the empty one where it goes (linear probing)."""
        slots = self.slots
        mask = self.mask
        spot = print_ & mask
        while True:
            seen = slots[spot]
            if seen == print_ or not seen:
                return spot
            spot = (spot + 1) & mask

    @property
    def full(self) -> bool:
        return self.count > self.limit

    def _grow(self) -> None:
        """Twice the slots, filled from the fingerprints held (each is its own first slot)."""
        size = 2 * len(self.slots)
        slots = array("I", bytes(4 * size))
        mask = size - 1
        for print_ in filter(None, self.slots):  # (the empty half skipped in C)
            spot = print_ & mask
            while slots[spot]:
                spot = (spot + 1) & mask
            slots[spot] = print_
        self.slots, self.mask = slots, mask


def key_row_write(key: InstanceKey, row: tuple[Any, ...]) -> SqlWrite:
    """The task store's buffer item of a key row (`KEY_ROW_SQL`'s 13 columns, or a take's
    10: `key_row_statements`); not fenced: a key belongs to its caller, not to one lease of
    the caller's instance."""
    return SqlWrite(KEY_ROW_KIND, row)


# A caller's scope as a plain tuple, `(swarm_name, caller_role, caller_id)` (a C call: no
# Python frame on the keyed hot path, where it ran four times a request).
_scope: Callable[[InstanceKey], Scope] = operator.attrgetter(
    "swarm_name", "caller_role", "caller_id"
)


class BufferedSqliteIdempotencyStore(SqliteIdempotencyStore):
    """`SqliteIdempotencyStore` whose ``POST /message`` keys travel with their task's writes."""

    def __init__(self, path: Any, task_store: Any) -> None:
        super().__init__(path)
        self.tasks = task_store  # a SqliteTaskStore on the same file
        # Its write-behind buffer (`take_now` queues key rows straight into it).
        self._buffer: Any = getattr(task_store, "_buffer", None)
        self._known: dict[Scope, KeyFilter] = {}  # per caller: the keys on the file (and more)
        self._loading: dict[Scope, asyncio.Future[KeyFilter]] = {}
        # Keys taken whose request has not finished: when its row went through the buffer,
        # that row (to write again whole with the outcome, or as released) and the buffer's
        # count of accepted writes once it was in (None: unknown), which tells whether it is
        # committed (nothing may name its task before: `settle`); None when it was committed
        # on its own. Never evicted (`evict_finished`).
        self._taken: dict[tuple[Scope, str], Taken | None] = {}
        # Per caller: the `now` of the last `purge` of its expired keys alone (`count`).
        self._purged: dict[Scope, float] = {}

    # -- the buffer and the per-caller filters ---------------------------------------------
    async def _settle(self) -> None:
        """Everything queued in the task store's buffer committed (a read or a write on the
        file then sees the key rows queued before it); StoreUnavailableError at once while
        the task store reports an outage (a full disk: it waited `FLUSH_TIMEOUT` then), else
        after `FLUSH_TIMEOUT`."""
        if self._degraded() and (self._buffer is None or self._buffer.pending):
            raise StoreUnavailableError(
                "the store cannot write (see GET /status): the request's Idempotency-Key is "
                "not stored; retry later"
            )
        if not await self.tasks.flush(FLUSH_TIMEOUT):
            raise StoreUnavailableError(
                "idempotency keys cannot be read: the task store's pending writes were not "
                f"stored within {FLUSH_TIMEOUT:.0f}s"
            )

    def _degraded(self) -> bool:
        degraded = getattr(self.tasks, "is_degraded", None)
        return bool(callable(degraded) and degraded())

    async def settle(self, scope: InstanceKey | None = None, key: str | None = None) -> None:
        """Before a request or a duplicate hears of a task whose key went into the buffer (an
        answer, a stream's first event, a 409 naming it): the key is committed, else
        StoreUnavailableError (at once while the task store reports an outage, after
        `FLUSH_TIMEOUT` when its commits wait, e.g. on another process's write lock)."""
        if key is not None and scope is not None:
            if self.settled(scope, key):  # committed with the task (the usual case)
                return
        elif self._buffer is not None and not self._buffer.pending:
            return
        await self._settle()

    def settled(self, scope: InstanceKey, key: str) -> bool:
        """Whether the key's row is committed (or was never queued), known with no await: the
        usual case once its task answered, as the task store committed the key with the
        task's first writes. False: `await settle(scope, key)`."""
        taken = self._taken.get((_scope(scope), key))
        if taken is None:
            return True
        mark = taken[1]
        return mark is not None and self._buffer is not None and self._buffer.rider_written(mark)

    async def _keys_of(self, scope: InstanceKey) -> KeyFilter:
        """The caller's set of keys (read from the file on first use)."""
        owner = _scope(scope)
        known = self._known.get(owner)
        if known is not None:
            return known
        loading = self._loading.get(owner)
        if loading is None:
            loading = asyncio.get_running_loop().create_future()
            self._loading[owner] = loading
            try:
                await self._settle()
                args = owner
                rows = await self.db.run(lambda conn: conn.execute(_LOAD, args).fetchall())
                known = KeyFilter([row[0] for row in rows])
                self._known[owner] = known
                loading.set_result(known)
            except BaseException as exc:
                loading.set_exception(exc)
                loading.exception()  # (retrieved: the waiters, if any, raise it)
                raise
            finally:
                del self._loading[owner]
            return known
        return await asyncio.shield(loading)

    def _queue(self, scope: InstanceKey, row: tuple[Any, ...]) -> bool:
        """Put a key row in the task store's buffer (False when it is full: an outage)."""
        return bool(self.tasks.write_nowait(scope, KEY_ROW_KIND, row))

    # -- takes -----------------------------------------------------------------------------
    async def take_with_work(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        if self._degraded():  # an outage: committed on its own first (or refused), as before
            return await self._take_alone(scope, key, record, replace=replace, over=over)
        owner = _scope(scope)
        known = self._known.get(owner) or await self._keys_of(scope)
        if known.add(key):
            # Taken before (a retry, a takeover, or a key reused after it expired), or one of
            # the filter's false "present": the file has the answer. Only the same request
            # takes over one never finished.
            held = await self.get(scope, key, record.created_at)
            if held is not None and (
                not replace
                or held.finished
                or held.fingerprint != record.fingerprint
                or (over is not None and held.created_at != over)
            ):
                return held
            reloaded = await self._keys_of(scope)  # (a sweep may have reloaded it meanwhile)
            if reloaded is not known:  # (the same filter has it: counted once)
                reloaded.add(key)
            known = reloaded
        if not self._queued(scope, owner, known, key, record):
            # the buffer is full: committed on its own, as before
            return await self._take_alone(scope, key, record, replace=replace, over=over)
        return None

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
        """The usual case of `take_with_work`, with no await: the caller's filter is loaded
        and does not have the key (so the file does not), and its row goes into the buffer,
        as its write number ... (the buffer's count of accepted writes then: committed once
        `written` says so), which is returned. 0 otherwise, with nothing written (the key may
        be in the filter now: then `take_with_work` reads the file, as for any key the
        filter has)."""
        owner = _scope(scope)
        known = self._known.get(owner)
        buffer = self._buffer
        if known is None or buffer is None:
            if known is None:
                return 0
            record = KeyRecord(fingerprint, created_at, expires_at, subject, context, holder)
            return int(self._take_queued(scope, owner, known, key, record))
        # The task store's `is_degraded` (an outage, or a batch stalled for seconds), asked
        # only while its buffer is failing or writing: idle, it is neither.
        if buffer.outage_since is not None or (
            buffer.writing_since is not None and self.tasks.is_degraded()
        ):
            return 0
        if known.add(key):
            return 0
        # `_queued`, inline (the keyed request's hot path): the row (`take_row`'s columns, no
        # outcome yet) straight into the task store's buffer, as a rider.
        row = (
            *owner,
            key,
            fingerprint,
            subject,
            context_text(context),
            holder,
            created_at,
            expires_at,
        )  # (a take's: `TAKE_ROW_COLUMNS`, no outcome)
        mark: int = buffer.put_rider(row)
        if not mark:
            return 0  # full: an outage
        if known.count > known.limit:  # (`full`) read again from the file
            self._known.pop(owner, None)
        self._taken[(owner, key)] = (row, mark)
        return mark

    def written(self, mark: int) -> bool:
        """Whether the key row `take_fields_now` took as rider `mark` is committed."""
        buffer = self._buffer
        return buffer is not None and buffer.riders_done >= mark  # (`rider_written`, inline)

    def _take_queued(
        self, scope: InstanceKey, owner: Scope, known: KeyFilter, key: str, record: KeyRecord
    ) -> bool:
        """`take_now` of a task store without a buffer of its own."""
        if self._degraded() or known.add(key):
            return False
        return self._queued(scope, owner, known, key, record)

    def _queued(
        self, scope: InstanceKey, owner: Scope, known: KeyFilter, key: str, record: KeyRecord
    ) -> bool:
        """A free key's row into the buffer, as a rider of its next batch (a task store
        without a buffer of its own: queued) (False when it is full: nothing written)."""
        row = take_row(owner, key, record)  # (no outcome: `TAKE_ROW_SQL`)
        buffer = self._buffer
        if buffer is not None:
            mark: int | None = buffer.put_rider(row)
            if not mark:
                return False
        elif self._queue(scope, row):
            mark = None  # (committed when the task store says so: `settle` flushes it)
        else:
            return False
        if known.full:  # read again from the file at the caller's next take
            self._known.pop(owner, None)
        self._taken[(owner, key)] = (row, mark)
        return True

    async def _take_alone(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool,
        over: float | None = None,
    ) -> KeyRecord | None:
        """`take`, committed on its own; a database that cannot write refuses it (503)."""
        try:
            return await BufferedSqliteIdempotencyStore.take(
                self, scope, key, record, replace=replace, over=over
            )
        except sqlite3.OperationalError as exc:
            raise StoreUnavailableError(
                f"the store cannot write ({exc}): the request's Idempotency-Key is not "
                "stored; retry later"
            ) from exc

    def _noted(self, scope: InstanceKey, known: KeyFilter, key: str) -> None:
        known.add(key)
        if known.full:  # read again from the file at the caller's next take
            self._known.pop(_scope(scope), None)

    async def take(
        self,
        scope: InstanceKey,
        key: str,
        record: KeyRecord,
        *,
        replace: bool = False,
        over: float | None = None,
    ) -> KeyRecord | None:
        known = await self._keys_of(scope)
        if key in known:
            await self._settle()  # its row may be in the buffer
        held = await super().take(scope, key, record, replace=replace, over=over)
        if held is None:
            self._noted(scope, await self._keys_of(scope), key)
            self._taken[(_scope(scope), key)] = None
        return held

    def let_go(self, scope: InstanceKey, key: str) -> None:
        self._taken.pop((_scope(scope), key), None)

    def carried(self, scope: InstanceKey, key: str) -> bool:
        """Whether the key's row went into the task store's buffer ahead of its task's
        writes (its request under way): whatever that task stores later is committed after
        the key, as an outcome row queued then would be."""
        return self._taken.get((_scope(scope), key)) is not None

    # -- outcomes and releases -------------------------------------------------------------
    async def finish(
        self, scope: InstanceKey, key: str, status: int, content_type: str | None, body: bytes
    ) -> None:
        # Committed before it returns (a route that answers after it): the buffer first.
        self._taken.pop((_scope(scope), key), None)
        await self._settle()
        await super().finish(scope, key, status, content_type, body)

    async def finish_many(
        self, outcomes: list[tuple[InstanceKey, str, int, str | None, bytes]]
    ) -> None:
        rest = []
        for outcome in outcomes:
            scope, key, status, content_type, body = outcome
            taken = self._taken.pop((_scope(scope), key), None)
            if taken is None or not self._queue(
                scope, (*taken[0][:10], status, content_type, body)
            ):
                rest.append(outcome)
        if rest:
            await self._settle()
            await super().finish_many(rest)

    async def release(self, scope: InstanceKey, key: str) -> None:
        taken = self._taken.pop((_scope(scope), key), None)
        row = None if taken is None else taken[0]
        # Written as expired at once: absent for every read, overwritten by a new take (the
        # filter still says "present": the key's next take reads the file first).
        if row is not None and self._queue(scope, (*row[:9], row[8], None, None, None)):
            # Committed before the refusal leaves: were the key's row on the file and its
            # release not, a retry after a crash would be answered with another turn's work.
            # (Refusals only; in an outage the release stays queued, as every write does.)
            await self.tasks.flush(FLUSH_TIMEOUT)
            return
        await self._settle()
        await super().release(scope, key)

    # -- reads and housekeeping: on the file, after the buffer -----------------------------
    async def get(self, scope: InstanceKey, key: str, now: float) -> KeyRecord | None:
        await self._settle()
        return await super().get(scope, key, now)

    async def count(self, scope: InstanceKey, now: float) -> int:
        await self._settle()
        owner = _scope(scope)
        if self._purged.pop(owner, None) != now:
            return await super().count(scope, now)
        # Right after `purge(now, scope)` (the guard's recount at the caller's bound): none of
        # its keys expired by `now` is left, so the key index counts them (a key expired or
        # released since is counted too: a count errs toward the bound, never below it).
        return int(await self.db.run(lambda conn: conn.execute(_COUNT_ALL, owner).fetchone()[0]))

    async def purge(self, now: float, scope: InstanceKey | None = None) -> int:
        await self._settle()
        removed = await super().purge(now, scope)
        if scope is None:
            self._known.clear()  # read again when next needed: the expired keys drop out
            self._purged.clear()
        else:
            self._purged[_scope(scope)] = now
        return removed

    async def evict_finished(self, scope: InstanceKey, count: int) -> int:
        """The caller's `count` oldest finished keys forgotten: of other routes, those with
        an outcome; of ``POST /message`` (a key with a task), those whose task is not
        running (or was never stored), with an outcome or not (answered from their task, or
        left by a crash): a stream its client dropped has one while its task runs on, and a
        repeat must still attach to that task, not start another. Never a key whose
        request is under way here."""
        await self._settle()
        owner = _scope(scope)
        limit = max(count, 0)

        def evict(conn: sqlite3.Connection) -> int:
            # Read here, on the database thread (a copy is atomic): a key taken meanwhile is
            # in it before its row can reach the file (both happen in one step of the loop).
            busy = {key for (who, key) in self._taken.copy() if who == owner}
            wanted = limit + len(busy)
            # Among the caller's oldest keys (a quarter more than wanted: room for keys whose
            # task runs, or whose request died without an outcome); among all of them when
            # these hold too few finished ones.
            oldest = wanted + wanted // 4 + 16
            rows = conn.execute(_FINISHED_OLDEST, (*owner, wanted, oldest)).fetchall()
            if len(rows) < wanted:
                rows = conn.execute(_FINISHED, (*owner, wanted)).fetchall()
            rowids = [(rowid,) for rowid, key in rows if key not in busy][:limit]
            conn.executemany(_FORGET, rowids)
            return len(rowids)

        removed: int = await self._write(evict)
        return removed
