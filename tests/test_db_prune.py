"""`mail db-prune`: expired finished tasks removed by hand, space given back; refused on a
file a server is using."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from mail.store import InstanceKey
from mail.store.postgres import PostgresTaskStore
from mail.store.sqlite import SqliteTaskStore
from server_fixtures import (
    ROOT_ALICE_BOB,
    free_port,
    get_task,
    keyed_stub_server,
    post_as,
    run_cli,
    server_env,
    write_config,
)

pytestmark = pytest.mark.timeout(120)
KEY = InstanceKey("stub", "user", "alice")


async def _fill(store: SqliteTaskStore | PostgresTaskStore, finished: int) -> None:
    await store.start()
    try:
        for n in range(finished):
            task_id = f"done-{n}"
            await store.upsert_task(
                KEY,
                {
                    "task_id": task_id,
                    "task_owner": "user:alice@stub",
                    "is_running": False,
                    "completed": True,
                    "state": "completed",
                },
            )
            await store.append_event(KEY, task_id, {"event": "new_message", "data": "x" * 300_000})
            await store.save_history(KEY, task_id, "supervisor", None, [{"content": "y" * 10}])
        await store.upsert_task(
            KEY, {"task_id": "busy", "task_owner": "user:alice@stub", "is_running": True}
        )
        assert await store.flush(30)
    finally:
        await store.close()


def _old_format(path: Path) -> None:
    """Make the file as older versions did: auto_vacuum = NONE (a full VACUUM switches it)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()


def test_db_prune_removes_finished_tasks_and_shrinks_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mail.db"
    asyncio.run(_fill(SqliteTaskStore(path), 120))
    # A file of an older version, too big to be switched when opened (the bound is 64 MiB;
    # lowered here, as the command runs in this process, to keep the file small).
    _old_format(path)
    monkeypatch.setattr("mail.store.sqlite_space.AUTO_CONVERT_BYTES", 1024)
    size = path.stat().st_size
    assert size > 30_000_000

    code, out, err = run_cli("db-prune", "--sqlite", str(path))
    assert code == 0, err
    assert "Removed 0 task(s)" in out  # none is 30 days old yet

    code, out, err = run_cli("db-prune", "--sqlite", str(path), "--older-than", "0")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Pruning SQLite {path}: every finished task"
    assert lines[1].startswith("Removed 120 task(s) (360 rows) in ")
    assert "run `mail db-prune --vacuum` once to make it shrink by itself" in out
    assert path.stat().st_size > size // 2  # free pages kept for new rows

    code, out, err = run_cli("db-prune", "--sqlite", str(path), "--older-than", "0", "--vacuum")
    assert code == 0, err
    assert "Removed 0 task(s)" in out
    assert path.stat().st_size < 1_000_000
    assert re.search(r"MiB -> 0\.[0-4] MiB", out), out
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental from now on
    assert [r[0] for r in conn.execute("SELECT task_id FROM tasks")] == ["busy"]
    conn.close()


def test_a_small_file_of_an_older_version_is_switched_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    asyncio.run(_fill(SqliteTaskStore(path), 20))
    _old_format(path)
    code, out, err = run_cli("db-prune", "--sqlite", str(path), "--older-than", "0")
    assert code == 0, err
    assert re.search(r"MiB -> 0\.[0-4] MiB", out) and "--vacuum" not in out, out
    assert sqlite3.connect(path).execute("PRAGMA auto_vacuum").fetchone()[0] == 2


def test_db_prune_refuses_a_file_a_server_uses(tmp_path: Path) -> None:
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB):
        code, out, err = run_cli(
            "db-prune", "--sqlite", str(tmp_path / "data" / "mail.db"), "--older-than", "0"
        )
    assert code == 1
    assert err.startswith("Error: ") and "in use by a running mail server (pid " in err
    assert "stop it first" in err and "[server.store] path" not in err  # that is for servers
    assert err.count("\n") == 1
    assert out == ""  # no "Pruning ..." headline for a prune that never started


def _bind_mounted(source: Path, target: Path) -> list[str] | None:
    """The command prefix that runs a program where ``target`` is a bind mount of the single
    file ``source`` (a private mount namespace: the mount ends with the program); None where
    this sandbox may not mount."""
    target.touch()
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    script = 'mount --bind "$0" "$1" && shift && exec "$@"'
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(
        [*prefix, script, str(source), str(target), "true"], capture_output=True, timeout=30
    )
    return [*prefix, script, str(source), str(target)] if probe.returncode == 0 else None


@pytest.mark.parametrize("second_name", ["hard link", "bind mount"])
def test_every_db_command_refuses_the_servers_file_under_another_name(
    tmp_path: Path, second_name: str
) -> None:
    """The lock is the database file's own (its inode): a hard link or a single-file bind mount
    of the file a server uses is refused by db-prune, db-copy, db-init and a second server,
    and the file stays whole. (db-prune through a hard link used to run: the lock was a file
    beside the database, found by name, and the link got its own lock and its own -wal.)"""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / "srv").mkdir()
    with keyed_stub_server(tmp_path / "srv", ROOT_ALICE_BOB) as server:
        database = tmp_path / "srv" / "data" / "mail.db"
        alias = other / "alias.db"
        prefix: list[str] = []
        if second_name == "hard link":
            os.link(database, alias)
        else:
            bound = _bind_mounted(database, alias)
            if bound is None:
                pytest.skip("this sandbox may not bind-mount a file (needs CAP_SYS_ADMIN)")
            prefix = bound
        finished = post_as(server, "alice", {"body": "hello"})
        paused = post_as(server, "alice", {"body": "BREAKPOINT keep me"})
        assert finished.status_code == paused.status_code == 200, (finished.text, paused.text)
        tasks = {finished.json()["task_id"], paused.json()["task_id"]}
        # A second server's config naming the alias as its store.
        write_config(other, port=free_port(), extra=f'[server.store]\npath = "{alias}"\n')
        (other / "swarms.json").write_text((tmp_path / "srv" / "swarms.json").read_text())

        def mail(*args: str) -> subprocess.CompletedProcess[str]:
            command = [*prefix, sys.executable, "-m", "mail.cli", *args]
            return subprocess.run(
                command, cwd=other, env=server_env(), capture_output=True, text=True, timeout=120
            )

        assert server.proc is not None
        held = f"{alias} is in use by another mail process (pid {server.proc.pid})"
        prune = mail("db-prune", "--sqlite", str(alias), "--older-than", "0", "--vacuum")
        assert (prune.returncode, prune.stdout) == (1, ""), (prune.stdout, prune.stderr)
        assert prune.stderr == (
            f"Error: the SQLite file is in use by a running mail server (pid {server.proc.pid}):"
            " stop it first (a running server prunes its file itself, every [server.store] "
            "prune_interval)\n"
        )
        init = mail("db-init", "--sqlite", str(alias))
        assert init.returncode == 1 and held in init.stderr, init.stderr
        copy = mail("db-copy", str(alias), f"sqlite:///{other / 'copy.db'}")
        assert copy.returncode == 1 and held in copy.stderr, copy.stderr
        second = mail("server", "--config", "mail.toml")
        assert second.returncode == 2 and held in second.stderr, second.stderr
        for task_id in tasks:  # the running server still has both, the paused one included
            assert get_task(server.base_url, server.keys["alice"], task_id).status_code == 200
    conn = sqlite3.connect(database)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {row[0] for row in conn.execute("SELECT task_id FROM tasks")}
    finally:
        conn.close()
    assert tasks <= stored


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "-5"], "'-5' is not a duration: it must be a finite number, 0 or more"),
        (["--older-than", "nan"], "'nan' is not a duration"),
        (["--older-than", "inf"], "'inf' is not a duration"),
        # Past the calendar: the cutoff printed as the year "1-01-01" and nothing was removed.
        (["--older-than", "100000000w"], "'100000000w' reaches back before the year 1"),
        (["--older-than", "1e15"], "'1e15' reaches back before the year 1; the longest is "),
        (["--sqlite", "{tmp}", "--database-url", BASE_URL], "--sqlite PATH or --database-url"),
        (["--sqlite", "{tmp}"], "is a folder, not a SQLite file"),
    ],
)
def test_db_prune_refuses_what_it_cannot_mean(
    tmp_path: Path, args: list[str], message: str
) -> None:
    code, out, err = run_cli("db-prune", *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert code == 1, (out, err)
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1, err
    assert out == ""
    assert (
        list(tmp_path.iterdir()) == [] and not (tmp_path.parent / f"{tmp_path.name}-lock").exists()
    )


def test_db_prune_with_a_ttl_near_the_calendars_start_removes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    asyncio.run(_fill(SqliteTaskStore(path), 3))
    code, out, err = run_cli("db-prune", "--sqlite", str(path), "--older-than", "700000d")
    assert code == 0, err
    assert "Removed 0 task(s)" in out
    assert "tasks finished before 01" in out, out  # a four-digit year (0110-...)


def test_db_prune_with_a_configured_ttl_past_the_calendar_removes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mail.db"
    asyncio.run(_fill(SqliteTaskStore(path), 3))
    config = tmp_path / "mail.toml"
    config.write_text('[server.store]\nfinished_task_ttl = "100000000w"\n', encoding="utf-8")
    code, out, err = run_cli(
        "db-prune", "--sqlite", str(path), env={"MAIL_CONFIG_PATH": str(config)}
    )
    assert code == 0, err
    assert "reaches back before the year 1: no task is that old, nothing to remove" in out, out


def test_db_prune_on_postgres_in_batches() -> None:
    with scratch_schema("mail_prune", BASE_URL) as schema:
        url = with_search_path(BASE_URL, schema)
        asyncio.run(_fill(PostgresTaskStore(url, min_size=1, max_size=2), 60))
        code, out, err = run_cli("db-prune", "--database-url", url, "--older-than", "0", "--vacuum")
        assert code == 0, err
        assert "Removed 60 task(s) (180 rows) in 2 batch(es), 0 team row(s), 0 file(s)." in out
        assert "Vacuumed " in out


@pytest.mark.parametrize(
    ("command", "toml", "message"),
    [
        (["db-prune"], '[server.store]\nfinished_task_ttl = "a month"\n', "'a month' is not a"),
        (["db-prune", "--older-than", "0"], "[server.store\n", "is not valid TOML"),
        (["db-prune"], "[server.store]\nfinished_task_ttl = inf\n", "inf is not a duration"),
        (["db-init"], '[server.store]\nkind = "disk"\n', "store.kind"),
    ],
)
def test_a_broken_config_is_one_error_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    toml: str,
    message: str,
) -> None:
    """The config names the store (and db-prune's default TTL): a mail.toml that does not
    load is one `Error: ...` line with exit status 1, as the docs say, not a traceback."""
    (tmp_path / "mail.toml").write_text(toml, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*command, env={"MAIL_CONFIG_PATH": str(tmp_path / "mail.toml")})
    assert code == 1, (out, err)
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1, err
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["mail.toml"]


def test_db_prune_follows_the_store_kind_as_the_server_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kind = "memory"` ignores DATABASE_URL, as the server does (it may name another
    deployment's database: pruning it was not asked for); `kind = "postgres"` without a URL
    is an error, not a prune of data/mail.db, which that server does not use."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "mail.toml"
    env = {"MAIL_CONFIG_PATH": str(config), "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"}
    config.write_text('[server.store]\nkind = "memory"\n', encoding="utf-8")
    code, out, err = run_cli("db-prune", "--older-than", "0", env=env)
    assert (code, err) == (0, ""), err
    assert 'kind = "memory" keeps nothing on disk' in out

    stale = tmp_path / "data" / "mail.db"
    asyncio.run(_fill(SqliteTaskStore(stale), 2))
    config.write_text('[server.store]\nkind = "postgres"\n', encoding="utf-8")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    code, out, err = run_cli("db-prune", "--older-than", "0", env={"MAIL_CONFIG_PATH": str(config)})
    assert code == 1, (out, err)
    assert err.startswith("Error: ") and "needs DATABASE_URL" in err and err.count("\n") == 1
    tasks = sqlite3.connect(stale).execute("SELECT count(*) FROM tasks").fetchone()[0]
    assert tasks == 3  # the file the server does not use is left as it was
