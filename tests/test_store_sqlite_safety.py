"""The SQLite file under attack: a second server, kill -9 mid-write, private modes, odd paths.

Servers run as `mail server` subprocesses; the heavy writer is a subprocess killed with
SIGKILL, whose file is then checked row by row.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from mail.store import InstanceKey
from mail.store.sqlite import SqliteTaskStore
from server_fixtures import ServerProcess, free_port, server_env, write_config, write_stub_swarms

pytestmark = pytest.mark.timeout(300)

KEY = InstanceKey("demo", "user", "u-1")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _server_dir(root: Path, name: str, store_path: Path) -> Path:
    directory = root / name
    directory.mkdir()
    write_stub_swarms(directory)
    extra = f'[server.store]\npath = "{store_path}"\n'
    write_config(directory, port=free_port(), extra=extra)
    return directory


def test_a_second_server_on_the_same_file_is_refused_until_the_first_dies(
    tmp_path: Path,
) -> None:
    store = tmp_path / "shared data ü" / "mail.db"  # spaces and non-ASCII in the path
    first_dir = _server_dir(tmp_path, "a", store)
    second_dir = _server_dir(tmp_path, "b", store)
    config = ["--config", "mail.toml"]
    port = free_port()
    first = ServerProcess(first_dir, port, args=[*config, "--port", str(port)]).start()
    try:
        assert f"MAIL data: {store}" in first.logs()
        port = free_port()
        second = ServerProcess(second_dir, port, args=[*config, "--port", str(port)])
        second.start(wait=False)
        assert second.wait_exit(60) == 2
        errors = second.stderr_path.read_text().strip().splitlines()
        assert errors == [
            f"mail server: error: {store} is in use by another mail process "
            f"(pid {first.proc.pid if first.proc else '?'}); stop it first, or give this one "
            "its own [server.store] path"
        ], second.logs()
    finally:
        assert first.proc is not None
        first.proc.kill()  # kill -9: the lock goes with the process, no stale lock file
        first.proc.wait(10)
    second.start()  # now it may
    assert second.stop() == 0, second.logs()


def test_the_file_and_its_folder_are_private(tmp_path: Path) -> None:
    path = tmp_path / "data" / "mail.db"

    async def use() -> None:
        store = SqliteTaskStore(path)
        await store.start()
        await store.upsert_task(KEY, {"task_id": "t", "title": "secret plans"})
        await store.flush(10)
        modes = {p.name: _mode(p) for p in path.parent.iterdir()}
        assert modes == {
            "mail.db": 0o600,
            "mail.db-wal": 0o600,
            "mail.db-shm": 0o600,
        }
        await store.close()

    old = os.umask(0o022)  # the usual umask, which made the file world-readable before
    try:
        asyncio.run(use())
    finally:
        os.umask(old)
    assert _mode(path.parent) == 0o700


def test_an_existing_folder_and_file_keep_their_modes(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    path = folder / "mail.db"
    sqlite3.connect(path).close()
    path.chmod(0o640)  # the owner chose to share it with a group

    async def use() -> None:
        store = SqliteTaskStore(path)
        await store.start()
        await store.close()

    asyncio.run(use())
    assert (_mode(folder), _mode(path)) == (0o755, 0o640)


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from mail.store import InstanceKey
    from mail.store.sqlite import SqliteTaskStore

    async def main() -> None:
        store = SqliteTaskStore(sys.argv[1], batch_delay=0.001)
        await store.start()
        key = InstanceKey("demo", "user", "u-1")
        n = 0
        while True:
            for task in range(8):
                tid = f"t{task}"
                await store.upsert_task(key, {"task_id": tid, "is_running": True, "n": n})
                await store.append_event(key, tid, {"event": "e", "data": "x" * 2000, "id": n})
                await store.save_history(key, tid, "sup", None, [{"role": "user", "n": n}])
            n += 1
            if n % 50 == 0:
                await store.flush(30)
                print(n, flush=True)

    asyncio.run(main())
    """
)


def test_kill_9_during_heavy_writes_leaves_whole_batches_in_order(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)],
        env=server_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    flushed = 0
    for line in writer.stdout:  # the writer says how far it has flushed
        flushed = int(line)
        if flushed >= 300:
            break
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(10)

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    async def load() -> None:
        store = SqliteTaskStore(path)
        await store.start()
        snap = await store.load_instance(KEY)
        await store.close()
        assert sorted(snap.tasks) == [f"t{i}" for i in range(8)]
        for tid, events in snap.events.items():
            ids = [int(e["id"]) for e in events]
            # every flushed event is there, once, in order, and nothing after a gap
            assert ids == list(range(len(ids))) and len(ids) >= flushed, (tid, ids[-3:])
            # the task record and the history are at least as new as the flushed events
            assert snap.tasks[tid]["n"] >= flushed - 1
            history = snap.histories[(tid, "sup")]
            assert history[0]["n"] >= flushed - 1

    asyncio.run(load())


def _not_sqlite(path: Path) -> str:
    path.write_text("these are notes, not a database\n" * 200)
    return "file is not a database"


def _newer_schema(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
        conn.execute("INSERT INTO schema_version VALUES (99, '')")
    return "the database has schema version 99, newer than this version of mail knows"


def _filled(path: Path, rows: int = 3000) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        conn.executemany("INSERT INTO notes (text) VALUES (?)", [("n" * 200,)] * rows)
    conn.close()


def _damaged_inside(path: Path) -> str:
    # A valid header and schema, garbage in the middle: it opens and migrates without a
    # complaint, and every read that touches the damage fails.
    _filled(path)
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(size // 2)
        file.write(b"\xde\xad\xbe\xef" * 2048)
    return "it is damaged (PRAGMA quick_check: "


@pytest.mark.parametrize(
    "spoil", [_not_sqlite, _newer_schema, _damaged_inside], ids=["not-sqlite", "newer", "damaged"]
)
def test_a_file_it_cannot_use_stops_the_server_in_one_line(
    spoil: Callable[[Path], str], tmp_path: Path
) -> None:
    store = tmp_path / "data" / "mail.db"
    store.parent.mkdir()
    expected = spoil(store)
    before = _contents(store)
    directory = _server_dir(tmp_path, "srv", store)
    port = free_port()
    server = ServerProcess(directory, port, args=["--config", "mail.toml", "--port", str(port)])
    server.start(wait=False)
    assert server.wait_exit(60) == 2
    errors = server.stderr_path.read_text().strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(
        f"mail server: error: cannot use the SQLite database {store}: {expected}"
    ), server.logs()
    assert _contents(store) == before  # left as it was


def _contents(path: Path) -> object:
    try:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError:
        return path.read_bytes()


def _start_on(tmp_path: Path, store: Path, extra: str = "") -> ServerProcess:
    directory = tmp_path / "srv"
    directory.mkdir()
    write_stub_swarms(directory)
    port = free_port()
    write_config(directory, port=port, extra=f'[server.store]\npath = "{store}"\n{extra}')
    server = ServerProcess(directory, port, args=["--config", "mail.toml", "--port", str(port)])
    return server.start()


def test_an_empty_file_that_becomes_a_new_database_is_said(tmp_path: Path) -> None:
    store = tmp_path / "data" / "mail.db"
    store.parent.mkdir()
    store.touch()  # emptied by accident (a truncating copy, a full disk at the wrong time)
    server = _start_on(tmp_path, store)
    try:
        out = server.stdout_path.read_text()
        assert f"MAIL data: {store} was an empty file (0 bytes); it is a new, empty database" in (
            out
        ), server.logs()
    finally:
        assert server.stop() == 0
    assert store.stat().st_size > 0


def test_the_integrity_check_of_a_large_file_is_bounded_and_says_so(tmp_path: Path) -> None:
    store = tmp_path / "data" / "mail.db"
    store.parent.mkdir()
    _filled(store, rows=20_000)
    server = _start_on(tmp_path, store, "integrity_check_seconds = 0.000001\n")
    try:
        out = server.stdout_path.read_text()
        assert "the integrity check of this" in out and "stopped after 1e-06 s" in out, out
        assert "[server.store] integrity_check_seconds" in out
    finally:
        assert server.stop() == 0
