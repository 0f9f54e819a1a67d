"""Persistence of team messaging: threads, their posts, agent inboxes and attachments.

`TeamStore` holds the SQL both databases run (`mail.store.sql`); `team_sqlite` and
`team_postgres` hold what each spells its own way."""

from __future__ import annotations

import abc
import datetime as _dt
import json
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from mail.store.lifecycle import finished_sql
from mail.store.records import InstanceKey
from mail.store.retrying import RetryingWrites
from mail.store.sql import Sql, SqlConn, json_field, octets
from mail.store.sql_batch import key_args

Record = dict[str, Any]


def dump_record(value: Any) -> str:
    """A record as the SQL stores keep it: compact JSON without NUL characters."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("\\u0000", "")


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


# Rows a team prune removes per statement (one transaction each).
TEAM_PRUNE_BATCH = 500

KEY = "swarm_name = ?1 AND caller_role = ?2 AND caller_id = ?3"


def trim_sql(table: str, column: str) -> str:
    """Keep the newest rows of one thread / one agent: parameters
    1-3 the key, 4 the thread or agent, 5 how many to keep."""
    where = f"{KEY} AND {column} = ?4"
    return (
        f"DELETE FROM {table} WHERE {where} AND seq <= ("
        f"SELECT seq FROM {table} WHERE {where} ORDER BY seq DESC LIMIT 1 OFFSET ?5)"
    )


# Posts, inbox entries and attachments name the task they came with ($.task_id). One whose
# task (of the same instance) is kept is kept too, whatever its age: a task that still runs
# or waits (a breakpoint, a review) may need it, and one finished (or changed) since the
# cutoff is read with it (an upload, its thread, its inbox) until the task prune removes it.
_OF_TASKS = ("team_posts", "team_inbox", "team_attachments")
_BY_SEQ = ("team_posts", "team_inbox")  # the tables with a `seq`

Write = Callable[[SqlConn], Awaitable[Any]]


async def _apply_all(c: SqlConn, writes: list[Write]) -> None:
    async with c.transaction():
        for write in writes:
            await write(c)


class TeamStore(abc.ABC):
    """Threads, inboxes and attachments of swarm instances."""

    # Stored posts per thread and inbox entries per agent (per instance): past these the
    # oldest are dropped as new ones arrive ([server.team_tools] max_posts_per_thread /
    # max_inbox_entries). None keeps everything.
    max_posts_per_thread: int | None = None
    max_inbox_entries: int | None = None
    sql: Sql
    writes: RetryingWrites[Write]
    # What differs in the tables: a new row's created_at, an empty BYTEA / BLOB, the order
    # threads were made in, the row id, and the cutoff (?1, text) as a created_at.
    postgres: bool
    _EMPTY_DATA: str
    _THREAD_ORDER: str
    _ROW_ID: str
    _CUTOFF_TIME: str
    _THREAD_CREATED: str  # what stands for a thread record's missing updated_at
    _direct = False  # writes applied at once, not through `writes`

    def _init_writes(self, is_transient: Callable[[BaseException], bool]) -> None:
        self.writes = RetryingWrites(self._apply, is_transient=is_transient, name="mail.store.team")

    @abc.abstractmethod
    async def start(self) -> None:
        """Open connections / prepare tables."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources. Idempotent."""

    @abc.abstractmethod
    def _created_at(self) -> Any:
        """A new row's created_at."""

    def status(self) -> dict[str, Any]:
        """Whether writes are failing (and why), for the server's health reporting."""
        writes = getattr(self, "writes", None)  # None on an in-memory database
        if writes is None:
            return {"degraded": False, "last_error": None, "pending_writes": 0}
        status: dict[str, Any] = writes.status()
        return status

    async def _apply(self, writes: list[Write]) -> None:
        await self.sql.run(_apply_all, writes)

    async def _write(self, op: Write, *, now: bool = False) -> None:
        if self._direct:  # an in-memory database: nothing to queue or retry
            await self._apply([op])
        else:
            await (self.writes.write_now if now else self.writes.write)(op)

    async def _rows(self, sql: str, *args: Any) -> list[Any]:
        return await self.sql.run(lambda c: c.fetch(sql, *args))

    async def _value(self, sql: str, *args: Any) -> Any:
        return await self.sql.run(lambda c: c.fetchval(sql, *args))

    # -- threads ---------------------------------------------------------------------
    async def save_thread(self, key: InstanceKey, thread: Record) -> None:
        """Create or replace a thread record (participants included)."""
        args = (*key_args(key), thread["thread_id"], dump_record(thread), self._created_at())
        await self._write(
            lambda c: c.execute(
                "INSERT INTO team_threads (swarm_name, caller_role, caller_id, thread_id,"
                " record, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT"
                " (swarm_name, caller_role, caller_id, thread_id) DO UPDATE SET"
                " record = excluded.record",
                *args,
            )
        )

    async def get_thread(self, key: InstanceKey, thread_id: str) -> Record | None:
        rows = await self._rows(
            f"SELECT record FROM team_threads WHERE {KEY} AND thread_id = ?4",
            *key_args(key),
            thread_id,
        )
        return json.loads(rows[0]["record"]) if rows else None

    async def list_threads(self, key: InstanceKey | None) -> list[tuple[InstanceKey, Record]]:
        """Threads of one instance, or of every instance of every swarm when key is None."""
        select = "SELECT swarm_name, caller_role, caller_id, record FROM team_threads"
        if key is None:
            rows = await self._rows(f"{select} ORDER BY {self._THREAD_ORDER}")
        else:
            rows = await self._rows(
                f"{select} WHERE {KEY} ORDER BY {self._THREAD_ORDER}", *key_args(key)
            )
        return [(InstanceKey(r[0], r[1], r[2]), json.loads(r["record"])) for r in rows]

    async def count_threads(self, key: InstanceKey) -> int:
        """How many threads this instance has (the thread quota counts them)."""
        return int(
            await self._value(f"SELECT COUNT(*) FROM team_threads WHERE {KEY}", *key_args(key)) or 0
        )

    async def add_post(self, key: InstanceKey, post: Record) -> None:
        args = (*key_args(key), post["thread_id"])
        record = dump_record(post)
        limit = self.max_posts_per_thread

        async def add(c: SqlConn) -> None:
            await c.execute(
                "INSERT INTO team_posts (swarm_name, caller_role, caller_id, thread_id, record)"
                " VALUES (?, ?, ?, ?, ?)",
                *args,
                record,
            )
            if limit is not None:
                # Keep the newest posts of the thread.
                await c.execute(trim_sql("team_posts", "thread_id"), *args, limit)

        await self._write(add)

    async def thread_posts(
        self, key: InstanceKey, thread_id: str, limit: int | None = None
    ) -> list[Record]:
        """Posts of a thread, oldest first (the last `limit` when given)."""
        rows = await self._rows(
            f"SELECT record FROM team_posts WHERE {KEY} AND thread_id = ?4"
            " ORDER BY seq DESC LIMIT ?5",
            *key_args(key),
            thread_id,
            self._limit(limit or None),
        )
        return [json.loads(r["record"]) for r in reversed(rows)]

    def _limit(self, limit: int | None) -> int | None:
        """`limit` as LIMIT takes it: no limit is NULL (PostgreSQL) or -1 (SQLite)."""
        return limit if limit is not None or self.sql.postgres else -1

    # -- inboxes ---------------------------------------------------------------------
    async def add_inbox_entries(self, key: InstanceKey, entries: Iterable[Record]) -> None:
        rows = [  # key, agent_name, entry_id, thread_id, ts, is_read, shown, record
            (
                *key_args(key),
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
        if not rows:
            return
        limit = self.max_inbox_entries

        async def add(c: SqlConn) -> None:
            await c.executemany(
                "INSERT INTO team_inbox (swarm_name, caller_role, caller_id, agent_name,"
                " entry_id, thread_id, ts, is_read, shown, record)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                rows,
            )
            if limit is not None:
                for agent in sorted({row[3] for row in rows}):
                    await c.execute(
                        trim_sql("team_inbox", "agent_name"), *key_args(key), agent, limit
                    )

        await self._write(add)

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

    async def select_inbox(self, key: InstanceKey, agent: str, query: InboxQuery) -> list[Record]:
        """`inbox` with its filters in one value."""
        order = "ASC" if query.oldest_first else "DESC"
        rows = await self._rows(
            f"SELECT record, is_read, shown FROM team_inbox WHERE {KEY} AND agent_name = ?4"
            " AND (CAST(?5 AS TEXT) IS NULL OR thread_id = ?5)"
            " AND (CAST(?6 AS TEXT) IS NULL OR ts > ?6)"
            " AND (NOT ?7 OR NOT shown) AND (NOT ?9 OR NOT is_read)"
            " AND (CAST(?10 AS TEXT) IS NULL OR entry_id = ?10)"
            f" ORDER BY seq {order} LIMIT ?8",
            *key_args(key),
            agent,
            query.thread_id,
            query.since,
            query.unshown_only,
            self._limit(query.limit),
            query.unread_only,
            query.entry_id,
        )
        entries: list[Record] = []
        for row in rows:
            entry: Record = json.loads(row["record"])
            entry["read"] = bool(row["is_read"])
            entry["shown"] = bool(row["shown"])
            entries.append(entry)
        return entries

    async def mark(
        self, key: InstanceKey, agent: str, entry_ids: Iterable[str], *, field: str
    ) -> None:
        """Set `field` ("read" or "shown") to true on these entries of `agent`."""
        column = {"read": "is_read", "shown": "shown"}[field]
        args = (*key_args(key), agent, list(entry_ids))
        await self._write(
            lambda c: c.execute(
                f"UPDATE team_inbox SET {column} = TRUE"
                f" WHERE {KEY} AND agent_name = ?4 AND entry_id = ANY(?5)",
                *args,
            )
        )

    async def unread_counts(
        self, key: InstanceKey, thread_id: str | None = None
    ) -> dict[str, dict[str, int]]:
        """agent -> {thread_id or "direct": unread count}; one thread only when given."""
        rows = await self._rows(
            "SELECT agent_name, COALESCE(thread_id, 'direct') AS place, COUNT(*) AS n"
            f" FROM team_inbox WHERE {KEY} AND NOT is_read"
            " AND (CAST(?4 AS TEXT) IS NULL OR thread_id = ?4) GROUP BY agent_name, place",
            *key_args(key),
            thread_id,
        )
        counts: dict[str, dict[str, int]] = {}
        for r in rows:
            counts.setdefault(r["agent_name"], {})[r["place"]] = int(r["n"])
        return counts

    # -- attachments -----------------------------------------------------------------
    async def put_attachment(self, key: InstanceKey, record: Record, data: bytes) -> None:
        args = (
            *key_args(key),
            record["attachment_id"],
            dump_record(record),
            data,
            self._created_at(),
        )
        await self._write(  # the bytes do not wait in memory (refused while it fails)
            now=True,
            op=lambda c: c.execute(
                "INSERT INTO team_attachments (swarm_name, caller_role, caller_id,"
                " attachment_id, record, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                # (replacing: a keyed request's retry stores its uploads under their ids)
                " ON CONFLICT (swarm_name, caller_role, caller_id, attachment_id) DO UPDATE"
                " SET record = excluded.record, data = excluded.data,"
                " created_at = excluded.created_at",
                *args,
            ),
        )

    async def attachment_bytes(self, key: InstanceKey) -> int:
        """Total size of this instance's attachments (the attachment quota counts them)."""
        return int(
            await self._value(
                f"SELECT COALESCE(SUM(length(data)), 0) FROM team_attachments WHERE {KEY}",
                *key_args(key),
            )
            or 0
        )

    async def get_attachment(
        self, key: InstanceKey, attachment_id: str, *, with_data: bool = True
    ) -> tuple[Record, bytes] | None:
        """(record, bytes) of an attachment of this instance; bytes are b"" without data."""
        column = "data" if with_data else f"{self._EMPTY_DATA} AS data"
        rows = await self._rows(
            f"SELECT record, {column} FROM team_attachments WHERE {KEY} AND attachment_id = ?4",
            *key_args(key),
            attachment_id,
        )
        if not rows:
            return None
        return json.loads(rows[0]["record"]), bytes(rows[0]["data"])

    # -- lifecycle -------------------------------------------------------------------
    async def stored_bytes(self, key: InstanceKey) -> int:
        """Bytes this instance keeps here: records of threads, posts and inbox entries, and
        attachments (the per-caller storage quota counts them with the caller's tasks)."""
        record, data = octets(self.postgres, "record"), octets(self.postgres, "data", binary=True)
        sizes = [(record, "team_threads"), (record, "team_posts"), (record, "team_inbox")]
        sizes.append((f"{data} + {record}", "team_attachments"))
        sql = "SELECT " + " + ".join(
            f"(SELECT COALESCE(SUM({size}), 0) FROM {table} WHERE {KEY})" for size, table in sizes
        )
        return int(await self._value(sql, *key_args(key)) or 0)

    def _expired(self, with_tasks: bool, live: bool) -> list[tuple[str, str]]:
        """(table, condition): what is older than the cutoff (?1), threads last, once their
        posts are gone; with the tasks' table, not a row of a task that is kept, nor (`live`)
        of a task the caller names (?3: a server on `--store memory` keeps its tasks in no
        table; SQLite only)."""
        pg = self.postgres
        thread_time = f"COALESCE({json_field(pg, 'record', 'updated_at')}, {self._THREAD_CREATED})"
        expired = [
            ("team_posts", f"{json_field(pg, 'record', 'timestamp')} < ?1"),
            ("team_inbox", "ts < ?1"),
            ("team_attachments", f"created_at < {self._CUTOFF_TIME}"),
            (
                "team_threads",
                f"{thread_time} < ?1 AND NOT EXISTS (SELECT 1 FROM team_posts p"
                " WHERE p.swarm_name = team_threads.swarm_name"
                " AND p.caller_role = team_threads.caller_role"
                " AND p.caller_id = team_threads.caller_id AND p.thread_id = team_threads.thread_id)",
            ),
        ]
        out = []
        for table, condition in expired:
            task_id = json_field(pg, f"{table}.record", "task_id")
            if table in _OF_TASKS and with_tasks:
                condition += (
                    f" AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.swarm_name = {table}.swarm_name"
                    f" AND t.caller_role = {table}.caller_role AND t.caller_id = {table}.caller_id"
                    f" AND t.task_id = {task_id} AND NOT (t.updated_at < {self._CUTOFF_TIME}"
                    f" AND {finished_sql(pg)}))"
                )
            if table in _OF_TASKS and live:
                condition += (
                    " AND NOT EXISTS (SELECT 1 FROM json_each(?3) l"
                    f" WHERE json_extract(l.value, '$[0]') = {table}.swarm_name"
                    f" AND json_extract(l.value, '$[1]') = {table}.caller_role"
                    f" AND json_extract(l.value, '$[2]') = {table}.caller_id"
                    f" AND json_extract(l.value, '$[3]') = {task_id})"
                )
            out.append((table, condition))
        return out

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
        # Without a task table (a team store on its own) no row has a task to wait for.
        with_tasks = bool(await self.sql.run(lambda c: c.tables(["tasks"])))
        live = bool(live_tasks) and not self.postgres
        removed = 0
        named = (json.dumps([[*key_args(k), t] for k, t in live_tasks]),) if live else ()
        as_text = cutoff.astimezone(_dt.UTC).isoformat()  # as the records hold times
        for table, condition in self._expired(with_tasks, live):
            of_task = named if table in _OF_TASKS else ()
            removed += await self._prune_table(table, condition, as_text, of_task)
        return removed

    async def _prune_table(
        self, table: str, condition: str, cutoff: str, named: tuple[str, ...]
    ) -> int:
        """`table`'s rows that meet `condition`, a batch per transaction (other writes go on
        in between). Each batch goes on where the last one stopped (by `seq`, or SQLite's
        rowid): rows that stay though older than the cutoff (a live task's) are read once
        per prune, not once per batch. (PostgreSQL's ctid has no such order.)"""
        row = "seq" if table in _BY_SEQ else self._ROW_ID
        in_order = row != "ctid"
        after = f"{row} > ?2 AND " if in_order else ""
        sql = (
            f"DELETE FROM {table} WHERE {row} IN (SELECT {row} FROM {table} WHERE {after}"
            f"({condition}){f' ORDER BY {row}' if in_order else ''} LIMIT {TEAM_PRUNE_BATCH})"
            f" RETURNING {row}"
        )

        async def step(c: SqlConn, *args: Any) -> list[Any]:
            async with c.transaction():
                return await c.fetch(sql, *args)

        removed, last = 0, -(1 << 63)  # (the lowest rowid)
        while True:
            rows = await self.sql.run(step, cutoff, *((last,) if in_order else ()), *named)
            removed += len(rows)
            if len(rows) < TEAM_PRUNE_BATCH:
                return removed
            if in_order:
                last = max(r[0] for r in rows)
