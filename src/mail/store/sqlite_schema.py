"""The SQLite database file: opening it (WAL, one writer) and its versioned schema."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from mail.store import schema
from mail.store.records import to_json

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, one server per file is on you
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")

logger = logging.getLogger("mail.store.sqlite")


# Raise it with any change to the tables (mail.store.schema): a file of an earlier version is
# brought to today's tables when it is opened (`migrate`), a newer one refused.
SCHEMA_VERSION = 5
NEW_FILE: tuple[str, ...] = tuple(
    s
    for t in schema.TABLES
    for s in (schema.create_table(t, "sqlite"), *schema.create_indexes(t, "sqlite"))
)
# What a rebuild of a table does for a file of an earlier version (logged once, one line).
_REBUILT = {
    "agent_histories": "agent histories are stored as appended segments",
    "idempotency_keys": "idempotency keys are a rowid table (faster writes)",
}


BUSY_TIMEOUT_MS = 30_000  # how long a statement waits for another process's lock


def utc_now() -> str:
    """What the schema's timestamps hold: ISO 8601 UTC text (sorts as time does)."""
    return datetime.now(UTC).isoformat()


_orjson_loads: Callable[[str], Any] | None
try:  # not a declared dependency (as in mail.store.base): used when installed
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - depends on the environment
    _orjson_loads = None

# 19 digits in a row: maybe an integer beyond 64 bits, which orjson reads as a float (its
# value changed: 2**70 + 1 comes back as 2**70). The stdlib keeps it exact.
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def _loads(text: str) -> Any:
    """The JSON text's value as the stdlib reads it: orjson unless the text may hold an
    integer beyond 64 bits, or holds what orjson refuses (NaN and infinities, which
    `to_json` writes when it falls back to the stdlib); either way the stdlib's value."""
    if _orjson_loads is not None and _LONG_DIGITS.search(text) is None:
        try:
            return _orjson_loads(text)
        except ValueError:  # orjson.JSONDecodeError
            pass
    return json.loads(text)


def _merge_json(current: str | None, extra: str) -> str:
    """Shallow merge of two JSON objects (PostgreSQL's `jsonb || jsonb`). Called by SQLite
    for each update of a task record, on the thread that commits (the event loop's, for a
    small batch): orjson's parse and `to_json`, 2-3x the stdlib's speed. It must not raise
    on what the store wrote: SQLite reports the function's error as an OperationalError,
    which the writer takes for an outage and retries for ever."""
    if not current:
        return extra
    merged = _loads(current)
    merged.update(_loads(extra))
    return to_json(merged)


def create_private(path: Path) -> None:
    """Create the file (and its missing folders) readable by its owner only: it holds task
    content. SQLite gives the -wal and -shm files the database file's mode. An existing
    file keeps its mode (the owner may have widened it on purpose)."""
    missing = not path.parent.exists()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if missing:
        path.parent.chmod(0o700)  # mkdir's mode is filtered through the umask
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        path.chmod(0o600)


MEMORY = ":memory:"  # the path of a private in-memory database (`open_database`)


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection in WAL mode with the functions the store's SQL uses (mail_now, mail_merge).
    `MEMORY`: a private in-memory database (no file, lock or WAL), gone when it closes.

    Autocommit (isolation_level None): transactions are explicit `BEGIN IMMEDIATE`s.
    synchronous=NORMAL: a commit survives the process being killed (not a power cut).
    A missing file is created private (`create_private`).
    """
    memory = str(path) == MEMORY
    if not memory:
        create_private(Path(path))
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row
    if memory:  # no file, no journal to share: nothing spills to disk either
        conn.execute("PRAGMA temp_store=MEMORY")
    else:
        from mail.store.sqlite_space import prepare_connection

        prepare_connection(conn)  # first: a new file's auto_vacuum mode (sqlite_space.py)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.create_function("mail_now", 0, utc_now)
    conn.create_function("mail_merge", 2, _merge_json, deterministic=True)
    return conn


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)"
    )
    return {row[0] for row in conn.execute("SELECT version FROM schema_version")}


def is_empty_file(path: Path) -> bool:
    """A database file of 0 bytes with no write-ahead log to recover: SQLite would make it a
    new, empty database without a word (a file emptied by accident loses everything)."""
    try:
        if path.stat().st_size != 0:
            return False
    except FileNotFoundError:
        return False
    wal = path.with_name(path.name + "-wal")
    return not wal.exists() or wal.stat().st_size == 0


@dataclass(frozen=True, slots=True)
class IntegrityCheck:
    problem: str | None  # the first problem `PRAGMA quick_check` found, None if none
    finished: bool  # False: skipped (0 s) or stopped at the time bound


def quick_check(conn: sqlite3.Connection, seconds: float) -> IntegrityCheck:
    """`PRAGMA quick_check`, stopped after `seconds` (a huge file takes minutes).

    A file damaged inside (random bytes in the middle of a page) opens and migrates
    without complaint, and then fails every read that touches the damage; this finds it at
    start-up. A file that is not SQLite at all raises instead (as `connect` would).
    """
    if seconds <= 0:
        return IntegrityCheck(None, False)
    deadline = time.monotonic() + seconds
    stopped = False

    def past_deadline() -> bool:
        nonlocal stopped
        stopped = time.monotonic() > deadline
        return stopped

    conn.set_progress_handler(past_deadline, 20_000)
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.OperationalError:
        if stopped:
            return IntegrityCheck(None, False)
        raise
    except sqlite3.DatabaseError as exc:  # "database disk image is malformed"
        return IntegrityCheck(str(exc), True)
    finally:
        conn.set_progress_handler(None, 0)
    first = " ".join(str(rows[0][0]).split()) if rows else "ok"  # one line
    return IntegrityCheck(None if first == "ok" else first, True)


def migrate(conn: sqlite3.Connection, progress: Callable[[int], None] | None = None) -> list[int]:
    """Bring the file to today's tables, in one transaction; returns the versions it gained
    (none when it is up to date)."""
    done = applied_versions(conn)
    newer = max(done, default=0)
    if newer > SCHEMA_VERSION:
        raise RuntimeError(
            f"the database has schema version {newer}, newer than this version of mail "
            f"knows ({SCHEMA_VERSION}); upgrade mail"
        )
    if newer == SCHEMA_VERSION:
        return []
    gained = list(range(newer + 1, SCHEMA_VERSION + 1))
    for version in gained:
        if progress:
            progress(version)
    with transaction(conn):
        changes = []
        if done:
            changes = _converge(conn)
        else:  # a new file
            for statement in NEW_FILE:
                conn.execute(statement)
        conn.executemany(
            "INSERT INTO schema_version VALUES (?, ?)", [(v, utc_now()) for v in gained]
        )
    if changes:
        logger.info("SQLite schema upgraded to version %d: %s", SCHEMA_VERSION, "; ".join(changes))
    return gained


def _converge(conn: sqlite3.Connection) -> list[str]:
    """Make a file of an earlier version hold today's tables, compared with a new file made
    in memory: a missing table or index is made, a missing column added, and a table whose
    keys or layout SQLite cannot change in place is rebuilt, its rows kept. What changed."""
    today = sqlite3.connect(":memory:")
    try:
        for statement in NEW_FILE:
            today.execute(statement)
        changes = []
        for table in schema.TABLES:
            name = table.name
            have, want = _shape(conn, name), _shape(today, name)
            assert want is not None
            if have is None:
                for statement in _statements(today, name):
                    conn.execute(statement)
                continue
            added = [d for c, d in want.columns.items() if c not in have.columns]
            if (
                have.keys != want.keys
                or have.rowid != want.rowid
                or any(_COMPUTED_DEFAULT.search(d) for d in added)  # ADD COLUMN refuses it
            ):
                _rebuild(conn, today, name, [c for c in want.columns if c in have.columns])
                changes.append(_REBUILT.get(name, f"{name} rebuilt") + " (rows kept)")
            else:
                for definition in added:
                    conn.execute(f"ALTER TABLE {name} ADD COLUMN {definition}")
                for columns, statement in want.indexes.items():
                    if columns not in have.indexes and columns not in have.keys:
                        conn.execute(statement)
        return changes
    finally:
        today.close()


_COMPUTED_DEFAULT = re.compile(r"DEFAULT [A-Za-z_]+\(")  # a default computed per row


@dataclass(frozen=True, slots=True)
class _Shape:
    columns: dict[str, str]  # name -> its definition, as ADD COLUMN takes it
    keys: frozenset[tuple[str, ...]]  # the columns of each unique index or key
    indexes: dict[tuple[str, ...], str]  # the columns of each other index -> its CREATE
    rowid: bool


def _shape(conn: sqlite3.Connection, table: str) -> _Shape | None:
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if row is None:
        return None
    columns = {
        name: " ".join(
            [name, kind, *(["NOT NULL"] if notnull else []), *([f"DEFAULT {d}"] if d else [])]
        )
        for _cid, name, kind, notnull, d, _pk in conn.execute(f"PRAGMA table_info({table})")
    }
    keys: set[tuple[str, ...]] = set()
    indexes: dict[tuple[str, ...], str] = {}
    for _seq, index, unique, _origin, _partial in conn.execute(f"PRAGMA index_list({table})"):
        cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({index})"))
        if unique:
            keys.add(cols)
        else:
            found = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (index,))
            indexes[cols] = found.fetchone()[0]
    return _Shape(columns, frozenset(keys), indexes, "WITHOUT ROWID" not in row[0].upper())


def _statements(conn: sqlite3.Connection, table: str) -> list[str]:
    """The CREATE statements of `table` and its indexes, as `conn` made them."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND sql IS NOT NULL"
            " ORDER BY type = 'index'",
            (table,),
        )
    ]


def _rebuild(
    conn: sqlite3.Connection, today: sqlite3.Connection, table: str, kept: list[str]
) -> None:
    """`table` made again as `today` has it, with the `kept` columns of its rows (in the
    order they were written: sequence numbers and rowids keep their order)."""
    old = f"{table}_old"
    conn.execute(f"ALTER TABLE {table} RENAME TO {old}")
    for statement in _statements(today, table):
        if statement.upper().startswith("CREATE TABLE"):
            conn.execute(statement)
    names = ", ".join(kept)
    order = " ORDER BY rowid" if _shape(conn, old).rowid else ""  # type: ignore[union-attr]
    conn.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {old}{order}")
    conn.execute(f"DROP TABLE {old}")
    for statement in _statements(today, table):
        if not statement.upper().startswith("CREATE TABLE"):
            conn.execute(statement)


class transaction:  # noqa: N801 - used like a function: `with transaction(conn):`
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error).

    The error that ended the transaction is the one raised. SQLite rolls a transaction back
    by itself after some errors (a full disk among them), and a ROLLBACK then fails with
    "cannot rollback - no transaction is active", which used to replace the real cause.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None:
            self._roll_back()
            return
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            self._roll_back()  # a failed COMMIT may leave the transaction open
            raise

    def _roll_back(self) -> None:
        if not self.conn.in_transaction:
            return
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error as exc:  # the error being raised says more than this one
            logger.warning("rollback after a failed write did not succeed: %s", exc)


def is_busy(exc: BaseException) -> bool:
    """A lock held by another connection (SQLITE_BUSY / SQLITE_LOCKED)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc)
    return "locked" in text or "busy" in text


def _checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def is_transient_error(exc: BaseException) -> bool:
    """Locked or busy files, disk full, I/O errors: worth retrying."""
    return isinstance(exc, sqlite3.OperationalError | OSError | TimeoutError)


class DatabaseInUseError(RuntimeError):
    """Another process (a running `mail server`) holds the file."""

    holder: str = "?"  # the holder's pid, as the kernel's lock table names it


class ProcessLock:
    """An exclusive `flock` on the database file itself for as long as one process uses it.

    Two servers on one file would each keep their own copy of every instance in memory and
    overwrite each other's task state, and a `mail db-prune` under a server corrupts it, so
    every mail process that opens the file (the server, db-prune, db-copy, db-init) takes
    this lock first, and the second one is refused. The lock belongs to the file's inode, not
    its name: another name of the same file (a hard link, a bind mount) finds it held, where
    SQLite's own locks do not help (each name gets its own `-wal` and `-shm`). On Linux a
    `flock` and SQLite's POSIX locks never meet, so readers (a backup, `sqlite3`) are not
    locked out. The kernel drops the lock when its process dies (kill -9 included): no stale
    lock blocks a restart.

    Closing any descriptor of a file drops the POSIX locks its process holds on it, SQLite's
    included: release this lock only after the process's connections to the file closed.
    """

    def __init__(self, database: Path) -> None:
        self.database = database
        self._fd: int | None = None

    def acquire(self) -> None:
        if fcntl is None or self._fd is not None:
            return
        create_private(self.database)
        fd = os.open(self.database, os.O_RDWR)  # (a file it cannot write is refused here)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _flock_holder(os.fstat(fd))
            os.close(fd)
            error = DatabaseInUseError(
                f"{self.database} is in use by another mail process (pid {holder}); stop it "
                "first, or give this one its own [server.store] path"
            )
            error.holder = holder
            raise error from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the lock

    def __enter__(self) -> ProcessLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _flock_holder(stat: os.stat_result) -> str:
    """The pid holding a `flock` on the file, from Linux's /proc/locks; "?" elsewhere.

    Its lines read ``1: FLOCK  ADVISORY  WRITE 4242 fe:00:5368061 0 EOF`` (device as
    major:minor in hex, then the inode); a stacked file system may show another device, so
    the inode alone decides when no line names both."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return "?"
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    same_inode = ""
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue  # (a process waiting for the lock has "->" in place of the kind)
        if fields[5] == device:
            return fields[4]
        if fields[5].rsplit(":", 1)[-1] == str(stat.st_ino):
            same_inode = same_inode or fields[4]
    return same_inode or "?"


# Small write batches run on the event loop's thread (`run_small`): a batch of a few requests
# takes ~0.1-1 ms of SQLite, less than handing it to the worker thread costs (measured on
# 2 cores: 0.2 ms of CPU per request of thread hops and GIL hand-overs, and 0.4 ms of
# latency). A batch whose encoded values exceed this many bytes goes to the thread.
INLINE_BATCH_BYTES = 256 * 1024
# With writes on the loop's thread, SQLite's own checkpoint (inside the COMMIT that crosses
# 1,000 WAL pages, with an fsync) would stall the loop: the store connection turns it off
# and `SqliteDatabase` checkpoints on its thread once about this many pages were written.
CHECKPOINT_PAGES = 1000
_THREAD_JOB_PAGES = 16  # what a job on the thread is counted as (team, webhooks, reads...)


class SqliteDatabase:
    """One database file: one connection, used by one worker thread and, for small write
    batches, by the event loop's thread while the worker is idle (never both at once).

    `await db.run(fn, *args)` runs `fn(conn, *args)` on that thread; `await db.run_small(fn,
    *args, pages=n)` runs it at once on the caller's thread when nothing is queued for the
    worker. Several stores share one object per file (see `open_database`); it is closed
    when the last one releases it.
    """

    def __init__(self, path: str | Path) -> None:
        # In memory (`MEMORY`): no file, lock, thread or checkpoint; every job runs at once
        # on the caller's thread, and the database opens at its first use (`run`).
        self.in_memory = str(path) == MEMORY
        self.path = Path(path)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._users = 0
        # Jobs handed to the worker thread, and those it finished (each counter written by
        # one thread only): equal means the worker does not touch the connection.
        self._submitted = 0
        self._finished = 0
        self._unchecked_pages = 0  # written since the last checkpoint (an estimate)
        self._checkpoint: asyncio.Future[Any] | None = None
        self._lock = ProcessLock(self.path)
        self.applied: list[int] = []

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    async def run(self, fn: Callable[..., T], *args: Any, pages: int = _THREAD_JOB_PAGES) -> T:
        """`fn(conn, *args)` on the worker thread. `pages`: about how many pages it writes
        (counted toward the next checkpoint, see CHECKPOINT_PAGES)."""
        if self.in_memory:
            if self._conn is None:
                # Kept as long as this object (its stores may close and start again, and
                # stores made with `share_with` see it), closed when it goes.
                self._conn = connect(MEMORY)
                self.applied = migrate(self._conn)
                weakref.finalize(self, self._conn.close)
            return fn(self._conn, *args)
        if self._executor is None or self._conn is None:
            raise sqlite3.OperationalError(f"the SQLite database {self.path} is closed")
        future = self._submit(fn, *args)
        self._wrote(pages)
        return await future

    def note_written(self, pages: int) -> None:
        """Count pages a job turned out to write (see `run`'s `pages`)."""
        self._wrote(pages)

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        assert self._executor is not None and self._conn is not None
        conn = self._conn

        def job() -> T:
            try:
                return fn(conn, *args)
            finally:
                self._finished += 1

        self._submitted += 1
        return asyncio.get_running_loop().run_in_executor(self._executor, job)

    async def run_small(self, fn: Callable[..., T], *args: Any, pages: int) -> T:
        """`run`, but at once on this thread when the worker has nothing to do (a short
        write: see INLINE_BATCH_BYTES). `pages`: about how many pages it writes.

        The busy timeout is off meanwhile: a lock held by another process (a `sqlite3`
        shell writing) sends the job to the worker, which waits for it, not the loop.
        """
        done, result = self.run_inline(lambda conn: fn(conn, *args), pages=pages)
        if done:
            return result  # type: ignore[return-value]
        return await self.run(fn, *args, pages=pages)

    def run_inline(
        self, fn: Callable[[sqlite3.Connection], T], *, pages: int
    ) -> tuple[bool, T | None]:
        """`(True, fn(conn))` run at once on this (the loop's) thread when the worker has
        nothing to do; `(False, None)` when it does, or when another process holds a lock
        `fn` needs (then `fn` must be safe to run again, on the worker: a transaction that
        rolled back, statements that find their own rows)."""
        conn = self._conn
        if conn is None or self._executor is None or self._submitted != self._finished:
            return False, None
        conn.execute("PRAGMA busy_timeout=0")
        try:
            result = fn(conn)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            return False, None
        finally:
            # Restored before the job can go to the thread: there it waits for the lock, and
            # this thread touches the connection no more once the worker may.
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._wrote(pages)
        return True, result

    def _wrote(self, pages: int) -> None:
        """Count written pages; past CHECKPOINT_PAGES, checkpoint on the worker thread."""
        self._unchecked_pages += pages
        if (
            self.in_memory
            or self._unchecked_pages < CHECKPOINT_PAGES
            or self._checkpoint is not None
        ):
            return
        self._unchecked_pages = 0
        self._checkpoint = self._submit(_checkpoint)
        self._checkpoint.add_done_callback(self._checkpointed)

    def _checkpointed(self, future: asyncio.Future[Any]) -> None:
        self._checkpoint = None
        if not future.cancelled() and future.exception() is not None:
            logger.warning("WAL checkpoint of %s failed: %s", self.path, future.exception())

    async def acquire(self) -> None:
        self._users += 1
        if self._conn is not None:
            return
        if self.in_memory:
            await self.run(lambda _conn: None)  # opens it
            return
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="mail-sqlite")
        loop = asyncio.get_running_loop()

        def open_file() -> sqlite3.Connection:
            self._lock.acquire()
            try:
                conn = connect(self.path)
            except BaseException:
                self._lock.release()
                raise
            try:
                self.applied = migrate(conn)
            except BaseException:
                conn.close()
                self._lock.release()
                raise
            conn.execute("PRAGMA wal_autocheckpoint=0")  # see CHECKPOINT_PAGES
            from mail.store.sqlite_space import convert_on_open

            try:
                convert_on_open(conn, self.path)  # an older file: switch to shrinking
            except sqlite3.Error as exc:  # e.g. no room for the rewrite: run as before
                logger.warning("could not switch %s to incremental auto-vacuum: %s", self.path, exc)
            return conn

        try:
            self._conn = await loop.run_in_executor(self._executor, open_file)
        except BaseException:
            self._users -= 1
            self._executor.shutdown(wait=False)
            self._executor = None
            raise

    async def acquire_for_store(self) -> None:
        """`acquire`, with any failure as the stores' StoreUnavailableError."""
        from mail.store.records import StoreUnavailableError

        try:
            await self.acquire()
        except Exception as exc:
            raise StoreUnavailableError(
                f"cannot use the SQLite database {self.path}: {type(exc).__name__}: {exc}"
            ) from exc

    async def release(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users or self._conn is None or self._executor is None:
            return
        conn, self._conn = self._conn, None
        executor, self._executor = self._executor, None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)
        self._lock.release()
        with _OPEN_LOCK:
            if _OPEN.get(self.path) is self:
                del _OPEN[self.path]


_OPEN: dict[Path, SqliteDatabase] = {}
_OPEN_LOCK = threading.Lock()


def open_database(path: str | Path) -> SqliteDatabase:
    """The process's `SqliteDatabase` for a file (created on first use; `acquire` it);
    for `MEMORY`, a new private in-memory database each time."""
    if str(path) == MEMORY:
        return SqliteDatabase(MEMORY)
    resolved = Path(path).expanduser().resolve()
    with _OPEN_LOCK:
        db = _OPEN.get(resolved)
        if db is None:
            db = _OPEN[resolved] = SqliteDatabase(resolved)
        return db
