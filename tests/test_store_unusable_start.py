"""`mail server` on a SQLite file it cannot write refuses to start: exit status 2 and one
line on stderr naming the file, the reason, and the setting to change; no traceback, no
server that answers healthy but cannot keep a task, and no API keys printed for a server
that never ran.

The file systems are real: a small tmpfs (support/full_disk.py) filled to ENOSPC or
remounted read-only; sidecar files made unusable with `chattr +i` (root too is refused).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from server_fixtures import ServerProcess, free_port, write_config, write_stub_swarms
from support.full_disk import Filler, small_disk

pytestmark = pytest.mark.timeout(180)


def _refused(tmp_path: Path, store: Path) -> str:
    """Start a server on `store`; it must exit 2 with one stderr line, which is returned."""
    directory = tmp_path / "srv"
    directory.mkdir()
    write_stub_swarms(directory)
    port = free_port()
    write_config(directory, port=port, extra=f'[server.store]\npath = "{store}"\n')
    server = ServerProcess(directory, port, args=["--config", "mail.toml"])
    server.start(wait=False)
    try:
        assert server.wait_exit(90) == 2, server.logs()
    finally:
        server.stop()
    errors = server.stderr_path.read_text().strip().splitlines()
    assert len(errors) == 1, server.logs()
    assert "Traceback" not in server.logs()
    assert " key (id " not in server.stdout_path.read_text(), "keys printed for a refused start"
    line = errors[0]
    assert line.startswith(f"mail server: error: cannot use the SQLite database {store}: ")
    assert "[server.store] path" in line, line
    return line


def _existing_database(path: Path) -> None:
    subprocess.run(
        ["uv", "run", "mail", "db-init", "--sqlite", str(path)], check=True, capture_output=True
    )


@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "existing-file"])
def test_a_full_disk_at_start_is_refused_in_one_line(tmp_path: Path, existing: bool) -> None:
    with small_disk(tmp_path / "disk", "2m") as disk:
        store = disk / "mail.db"
        if existing:
            _existing_database(store)
        Filler(disk).fill()
        line = _refused(tmp_path, store)
    assert "the disk is full" in line and "Errno" not in line, line


@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "existing-file"])
def test_a_read_only_folder_is_refused_in_one_line(tmp_path: Path, existing: bool) -> None:
    with small_disk(tmp_path / "disk", "2m") as disk:
        store = disk / "mail.db"
        if existing:
            _existing_database(store)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        line = _refused(tmp_path, store)
    assert "read-only file system" in line and "Errno" not in line, line


def _immutable(path: Path) -> None:
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip()}")


def _mutable(path: Path) -> None:
    subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.mark.parametrize("sidecar", ["mail.db-wal", "mail.db-shm"])
@pytest.mark.parametrize("kind", ["unwritable", "folder"])
def test_a_sidecar_file_it_cannot_use_is_named(tmp_path: Path, sidecar: str, kind: str) -> None:
    store = tmp_path / "data" / "mail.db"
    _existing_database(store)
    assert store.exists() and not store.with_name(sidecar).exists()
    stale = store.with_name(sidecar)
    if kind == "folder":
        stale.mkdir()
    else:
        stale.touch()
        _immutable(stale)
    try:
        line = _refused(tmp_path, store)
    finally:
        _mutable(stale)
    assert str(stale) in line, line
    assert ("not a regular file" if kind == "folder" else "cannot be written") in line, line


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_db_init_and_a_first_start_make_the_data_folder_private(tmp_path: Path) -> None:
    """The database holds every caller's data: the folder `mail db-init` or a first
    `mail server` creates for it is 0700 (the file 0600), whatever the umask."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    made = subprocess.run(
        ["sh", "-c", 'umask 022 && exec uv run mail db-init --sqlite "$0"', "new/data/mail.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    assert _mode(tmp_path / "new" / "data") == 0o700
    assert _mode(tmp_path / "new" / "data" / "mail.db") == 0o600

    directory = tmp_path / "srv"  # the default place: data/mail.db beside registries/
    directory.mkdir()
    write_stub_swarms(directory)
    port = free_port()
    write_config(directory, port=port)
    server = ServerProcess(directory, port, args=["--config", "mail.toml"])
    old = os.umask(0o022)
    try:
        server.start()
    finally:
        os.umask(old)
    try:
        assert _mode(directory / "data") == 0o700
        assert _mode(directory / "data" / "mail.db") == 0o600
    finally:
        assert server.stop() == 0, server.logs()
