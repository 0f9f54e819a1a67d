"""Loaded by a process started with this folder first on ``PYTHONPATH`` (a test's
``mail server``): every SQLite connection it opens checks that no two threads ever touch it
at once, and that a cursor is let go of on the thread that made it (a cursor that dies
elsewhere resets its statement there, maybe while the database thread runs the next one:
``sqlite3.InterfaceError: bad parameter or other API misuse``).

Each breach is appended, with the stack where it happened, to the file named by
``MAIL_SQLITE_GUARD_LOG``, and each connection watched to that name + ``.watched`` (so a
test can tell the guard was on); nothing else changes. Python 3.11's ``Connection.execute`` does
not go through ``cursor()``, so the connection's own statement methods are wrapped too.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import traceback
from collections.abc import Iterator
from typing import Any

_LOG = os.environ.get("MAIL_SQLITE_GUARD_LOG")
_REPORT_LOCK = threading.Lock()


def _report(what: str, stack: str | None = None) -> None:
    assert _LOG is not None
    stack = stack or "".join(traceback.format_stack(limit=14)[:-2])
    with _REPORT_LOCK, open(_LOG, "a", encoding="utf-8") as log:
        log.write(f"{what} (thread {threading.current_thread().name})\n{stack}---\n")


class _Holder:
    """Which thread is inside a call on one connection (and how deeply)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: int | None = None
        self.depth = 0

    @contextlib.contextmanager
    def inside(self, what: str) -> Iterator[None]:
        me = threading.get_ident()
        with self.lock:
            if self.thread not in (None, me):
                _report(f"{what} while another thread is inside a call on the connection")
            self.thread = me
            self.depth += 1
        try:
            yield
        finally:
            with self.lock:
                self.depth -= 1
                if self.depth == 0:
                    self.thread = None


class GuardedCursor(sqlite3.Cursor):
    def __init__(self, conn: GuardedConnection) -> None:
        super().__init__(conn)
        self._made_on = threading.get_ident()
        self._made_at = traceback.extract_stack(limit=12)[:-2]
        self._holder = conn._holder

    def __del__(self) -> None:
        if threading.get_ident() != self._made_on:
            made_at = "".join(traceback.format_list(self._made_at))
            _report("a cursor let go of on another thread than the one that made it", made_at)
        with self._holder.inside("a cursor let go of"):
            pass

    def execute(self, *args: Any) -> Any:
        with self._holder.inside("execute"):
            return super().execute(*args)

    def executemany(self, *args: Any) -> Any:
        with self._holder.inside("executemany"):
            return super().executemany(*args)

    def fetchone(self) -> Any:
        with self._holder.inside("fetchone"):
            return super().fetchone()

    def fetchmany(self, *args: Any) -> Any:
        with self._holder.inside("fetchmany"):
            return super().fetchmany(*args)

    def fetchall(self) -> Any:
        with self._holder.inside("fetchall"):
            return super().fetchall()

    def __next__(self) -> Any:
        with self._holder.inside("a cursor's next row"):
            return super().__next__()

    def close(self) -> None:
        with self._holder.inside("a cursor's close"):
            super().close()


class GuardedConnection(sqlite3.Connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holder = _Holder()

    def cursor(self, factory: Any = GuardedCursor) -> Any:
        with self._holder.inside("cursor"):
            return super().cursor(factory)

    def execute(self, *args: Any) -> Any:
        return self.cursor().execute(*args)

    def executemany(self, *args: Any) -> Any:
        return self.cursor().executemany(*args)

    def executescript(self, *args: Any) -> Any:
        return self.cursor().executescript(*args)

    def commit(self) -> None:
        with self._holder.inside("commit"):
            super().commit()

    def rollback(self) -> None:
        with self._holder.inside("rollback"):
            super().rollback()

    def close(self) -> None:
        with self._holder.inside("close"):
            super().close()


if _LOG:
    _connect = sqlite3.connect

    def _guarded_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", GuardedConnection)
        conn = _connect(*args, **kwargs)
        with _REPORT_LOCK, open(f"{_LOG}.watched", "a", encoding="utf-8") as watched:
            watched.write(f"{args[0] if args else kwargs.get('database')}\n")
        return conn

    sqlite3.connect = _guarded_connect  # type: ignore[assignment]
