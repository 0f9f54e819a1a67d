"""Persistence of team messaging: threads, their posts, agent inboxes and attachments.

`TeamStore` runs one SQL text on either database (`mail.store.sql`), with a branch on
`postgres` where they spell it apart; `SqliteTeamStore` (in the server's SQLite file, or in
memory) and `PostgresTeamStore` (its own pool; its tables are `mail.store.schema.TEAM_TABLES`)
open and close the connection."""

from __future__ import annotations

import abc
import datetime as _dt
import json
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mail.store.lifecycle import finished_sql
from mail.store.postgres_schema import create_unless_forbidden, normalize_dsn, open_pool
from mail.store.records import InstanceKey, StoreUnavailableError
from mail.store.retrying import RetryingWrites
from mail.store.schema import TEAM_TABLES
from mail.store.sql import PostgresSql, Sql, SqlConn, SqliteSql, json_field, octets
from mail.store.sql_batch import key_args
from mail.store.sqlite_schema import MEMORY, open_database, utc_now
from mail.store.sqlite_schema import is_transient_error as sqlite_transient

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
    postgres: bool
    _direct = False  # writes applied at once, not through `writes`

    def _init_writes(self, is_transient: Callable[[BaseException], bool]) -> None:
        self.writes = RetryingWrites(self._apply, is_transient=is_transient, name="mail.store.team")

    @abc.abstractmethod
    async def start(self) -> None:
        """Open connections / prepare tables."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources. Idempotent."""

    def _created_at(self) -> Any:
        """A new row's created_at (a timestamptz in PostgreSQL, ISO 8601 text in SQLite)."""
        return _dt.datetime.now(_dt.UTC) if self.postgres else utc_now()

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
        order = "ORDER BY created_at" + ("" if self.postgres else ", rowid")  # as made
        if key is None:
            rows = await self._rows(f"{select} {order}")
        else:
            rows = await self._rows(f"{select} WHERE {KEY} {order}", *key_args(key))
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
        empty = "''::bytea" if self.postgres else "X''"
        column = "data" if with_data else f"{empty} AS data"
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
        cutoff_time = "?1::text::timestamptz" if pg else "?1"  # the cutoff as a created_at
        created = "''" if pg else "created_at"  # for a thread record without updated_at
        thread_time = f"COALESCE({json_field(pg, 'record', 'updated_at')}, {created})"
        expired = [
            ("team_posts", f"{json_field(pg, 'record', 'timestamp')} < ?1"),
            ("team_inbox", "ts < ?1"),
            ("team_attachments", f"created_at < {cutoff_time}"),
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
                    f" AND t.task_id = {task_id} AND NOT (t.updated_at < {cutoff_time}"
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
        row = "seq" if table in _BY_SEQ else ("ctid" if self.postgres else "rowid")
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


class SqliteTeamStore(TeamStore):
    """In the server's database file: it shares the task store's `SqliteDatabase` (one
    connection, one thread, one writer)."""

    postgres = False

    def __init__(self, path: str | Path = MEMORY) -> None:
        """`path`: the server's database file; by default (`MEMORY`) a private in-memory
        database, ready without `start` and gone with the store (`--store memory`)."""
        self.db = open_database(path)
        self.sql = SqliteSql(self.db)
        self._started = False
        self._direct = self.db.in_memory
        if not self._direct:
            self._init_writes(sqlite_transient)

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True
            if not self._direct:
                self.writes.start()

    async def close(self) -> None:
        if self._started:
            self._started = False
            if not self._direct:
                await self.writes.close()
            await self.db.release()


class PostgresTeamStore(TeamStore):
    """On its own asyncpg pool; its four tables are created on start when missing."""

    postgres = True

    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 5) -> None:
        from mail.store.postgres import is_transient_error  # (imports asyncpg)

        self._dsn = normalize_dsn(database_url)
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None
        self.sql = PostgresSql(lambda: self.pool)
        self._init_writes(is_transient_error)

    async def start(self) -> None:
        if self._pool is None:
            self._pool = await open_pool(
                self._dsn,
                lambda conn: create_unless_forbidden(conn, TEAM_TABLES),
                purpose=" for team messaging",
                min_size=self._min_size,
                max_size=self._max_size,
                server_settings={"application_name": "mail-server-team"},
            )
            self.writes.start()

    async def close(self) -> None:
        if self.writes.running:
            await self.writes.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def pool(self) -> Any:
        if self._pool is None:
            raise StoreUnavailableError("the PostgreSQL team store is not started")
        return self._pool
