"""SQLite writes on the event loop's thread (`SqliteDatabase.run_small`), and what keeps them
safe: one user of the connection at a time, in order; a lock held by another process waits on
the database's thread, not on the loop; checkpoints on the database's thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

from mail.store import InstanceKey
from mail.store.sqlite import SqliteTaskStore
from mail.store.sqlite_schema import CHECKPOINT_PAGES

KEY = InstanceKey("demo", "user", "u-1")


def _ident(conn: sqlite3.Connection, log: list[str], name: str) -> int:
    log.append(name)
    return threading.get_ident()


async def test_a_small_write_runs_on_the_loop_only_when_the_thread_is_idle(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "mail.db")
    await store.start()
    db = store.db
    log: list[str] = []
    try:
        assert await db.run_small(_ident, log, "idle", pages=1) == threading.get_ident()

        release = threading.Event()

        def slow(conn: sqlite3.Connection) -> None:
            release.wait(30)
            log.append("slow")

        pending = asyncio.ensure_future(db.run(slow))
        await asyncio.sleep(0)  # handed to the thread
        behind = asyncio.ensure_future(db.run_small(_ident, log, "behind", pages=1))
        await asyncio.sleep(0.05)
        assert not behind.done()  # queued behind the thread's job, not run beside it
        release.set()
        await pending
        assert await behind != threading.get_ident()
        assert log == ["idle", "slow", "behind"]
    finally:
        await store.close()


async def test_a_file_locked_by_another_process_waits_on_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    store = SqliteTaskStore(path)
    await store.start()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # a `sqlite3` shell writing to the file
        await store.upsert_task(KEY, {"task_id": "t", "is_running": True})
        flushed = asyncio.ensure_future(store.flush(30))
        ticks = 0
        for _ in range(10):  # the loop keeps running while the write waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 10 and not flushed.done()
        # The thread waits for the lock (busy timeout restored before the job went there):
        # no attempt failed, so the store never reported an outage.
        done, _ = await asyncio.wait({flushed}, timeout=1.0)
        assert not done
        assert store._buffer.failed_attempts == 0, store._buffer.last_error
        other.execute("COMMIT")
        assert await flushed
        assert store._buffer.failed_attempts == 0, store._buffer.last_error
        assert "t" in (await store.load_instance(KEY)).tasks
    finally:
        other.close()
        await store.close()


async def test_the_connection_checkpoints_on_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    store = SqliteTaskStore(path)
    await store.start()
    db = store.db
    try:
        assert await db.run(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
        history = [{"role": "user", "content": "x" * 200_000}]
        await store.save_history(KEY, "t", "a", "completions", history)
        assert await store.flush(10)
        before = path.stat().st_size
        main_thread = threading.get_ident()
        seen: list[int] = []

        def note(conn: sqlite3.Connection) -> None:
            seen.append(threading.get_ident())

        await db.run_small(note, pages=CHECKPOINT_PAGES)  # crosses the mark
        checkpoint = db._checkpoint
        assert checkpoint is not None
        await checkpoint
        assert seen == [main_thread]
        assert path.stat().st_size > before + 150_000  # the history's pages left the WAL
    finally:
        await store.close()


async def test_large_writes_count_toward_checkpoints_so_the_wal_stays_small(tmp_path: Path) -> None:
    """Every page a batch writes counts toward the next checkpoint, on either thread: 40
    tasks of 1 MiB (each over INLINE_BATCH_BYTES, so written on the database's thread) leave
    a WAL of a few MiB, where counting each such batch as a few pages let it grow to tens."""
    path = tmp_path / "mail.db"
    store = SqliteTaskStore(path)
    await store.start()
    wal = Path(f"{path}-wal")
    try:
        peak = 0
        for i in range(40):
            body = f"{i}" + "x" * (1 << 20)
            await store.upsert_task(KEY, {"task_id": f"t{i}", "is_running": False})
            await store.save_history(KEY, f"t{i}", "a", "completions", [{"content": body}])
            assert await store.flush(30)
            checkpoint = store.db._checkpoint
            if checkpoint is not None:
                await checkpoint
            peak = max(peak, wal.stat().st_size)
        assert peak < 16 * (1 << 20), f"WAL grew to {peak / (1 << 20):.1f} MiB"
    finally:
        await store.close()


async def test_idempotency_takes_run_here_when_idle_and_wait_on_the_thread_for_a_lock(
    tmp_path: Path,
) -> None:
    """A key take (on the request path) runs on the loop's thread while the database's
    thread is idle, and is committed when it returns; a lock of another process sends it to
    the thread, which waits for the lock: the take neither fails nor runs twice."""
    from mail.store.idempotency import KeyRecord, SqliteIdempotencyStore

    path = tmp_path / "mail.db"
    store = SqliteIdempotencyStore(path)
    await store.start()
    scope = InstanceKey("demo", "user", "u-1")
    now = time.time()
    try:
        jobs = store.db._submitted
        assert await store.take(scope, "k1", KeyRecord("f1", now, now + 60)) is None
        assert store.db._submitted == jobs  # no job for the database's thread
        other = sqlite3.connect(path, isolation_level=None)
        try:  # committed already: another connection sees the key
            assert other.execute("SELECT count(*) FROM idempotency_keys").fetchone()[0] == 1
            other.execute("BEGIN IMMEDIATE")
            taking = asyncio.ensure_future(store.take(scope, "k2", KeyRecord("f2", now, now + 60)))
            done, _ = await asyncio.wait({taking}, timeout=1.0)
            assert not done  # waiting for the lock, on the thread
            other.execute("COMMIT")
            assert await taking is None
        finally:
            other.close()
        held = await store.take(scope, "k2", KeyRecord("f3", now, now + 60))
        assert held is not None and held.fingerprint == "f2"  # taken once, by the first
    finally:
        await store.close()
