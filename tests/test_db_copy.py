"""`mail db-copy`: a SQLite database moves into PostgreSQL (and back) with nothing lost,
and a server on PostgreSQL serves what a server on SQLite stored."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path
from tests.test_team_persistence import (  # noqa: F401 - fixtures
    _post,
    database,
    llm,
    script_thread_and_file,
)

from mail.store import InstanceKey
from mail.store.postgres import PostgresTaskStore
from mail.store.sqlite import SqliteTaskStore
from mail.store.team_base import TeamStore
from mail.store.team_postgres import PostgresTeamStore
from mail.store.team_sqlite import SqliteTeamStore
from server_fixtures import ServerProcess, auth, free_port, server_env, write_config
from team_e2e_support import json_result, team_config_extra

pytestmark = pytest.mark.timeout(600)

KEY = InstanceKey("demo", "user", "alice")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_copy", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


def db_copy(source: str, target: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mail.cli", "db-copy", source, target],
        cwd=cwd,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _fill(path: Path) -> None:
    tasks, team = SqliteTaskStore(path), SqliteTeamStore(path)
    await tasks.start()
    await team.start()
    review = {"pending_reviews": [{"call_id": "k1", "name": "send_email"}], "state": "waiting"}
    await tasks.upsert_task(KEY, {"task_id": "t1", "task_owner": "user:alice@demo", **review})
    await tasks.upsert_task(KEY, {"task_id": "t2", "completed": True, "title": "done"})
    for i in range(1, 4):
        await tasks.append_event(KEY, "t1", {"event": "new_message", "data": f"e{i}", "id": i})
    await tasks.save_history(KEY, "t1", "sup", None, [{"role": "user", "content": "hi"}])
    await tasks.save_response(KEY, "t2", {"message": {"body": "ok"}})
    await tasks.save_queue(KEY, "t1", [{"priority": 1, "seq": 1, "message": {"id": "m"}}])
    thread = {"thread_id": "th1", "title": "T", "participants": ["a"], "created_at": "1"}
    await team.save_thread(KEY, thread)
    await team.add_post(KEY, {"thread_id": "th1", "post_id": "p1", "body": "hello"})
    await team.add_inbox_entries(
        KEY, [{"agent": "a", "entry_id": "i1", "timestamp": "2025", "thread_id": "th1"}]
    )
    await team.mark(KEY, "a", ["i1"], field="read")
    await team.put_attachment(KEY, {"attachment_id": "f1", "size": 3}, b"abc")
    await tasks.close()
    await team.close()


async def _contents(tasks: Any, team: TeamStore) -> dict[str, Any]:
    await tasks.start()
    await team.start()
    try:
        snap = await tasks.load_instance(KEY)
        return {
            "snapshot": snap,
            "threads": await team.list_threads(KEY),
            "posts": await team.thread_posts(KEY, "th1"),
            "inbox": await team.inbox(KEY, "a"),
            "attachment": await team.get_attachment(KEY, "f1"),
        }
    finally:
        await tasks.close()
        await team.close()


async def test_sqlite_to_postgres_and_back_keeps_everything(pg_url: str, tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    await _fill(source)
    expected = await _contents(SqliteTaskStore(source), SqliteTeamStore(source))
    assert expected["snapshot"].tasks["t1"]["pending_reviews"][0]["call_id"] == "k1"
    assert expected["inbox"][0]["read"] is True

    moved = db_copy(str(source), pg_url, tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert "tasks: 2 row(s)" in moved.stdout and "team_attachments: 1 row(s)" in moved.stdout
    on_pg = await _contents(PostgresTaskStore(pg_url), PostgresTeamStore(pg_url))
    assert on_pg == expected

    back = tmp_path / "b.db"
    returned = db_copy(pg_url, f"sqlite:///{back}", tmp_path)
    assert returned.returncode == 0, returned.stderr
    assert await _contents(SqliteTaskStore(back), SqliteTeamStore(back)) == expected

    again = db_copy(str(source), pg_url, tmp_path)  # nothing is ever duplicated
    assert again.returncode == 1 and "already holds data" in again.stderr


def test_a_postgres_server_serves_what_a_sqlite_server_stored(
    database: str,  # noqa: F811
    llm: Any,  # noqa: F811
    tmp_path: Path,
    pg_url: str,
) -> None:
    swarm = f"copy-{uuid.uuid4().hex[:8]}"
    key, state = script_thread_and_file(llm, tmp_path, swarm, "Moved", b"moved bytes")
    port = free_port()
    config = write_config(tmp_path, port=port, swarm=swarm, extra=team_config_extra(tmp_path))

    args = ["--config", str(config)]
    on_sqlite = ServerProcess(tmp_path, port, args=args).start()
    try:
        out = _post(on_sqlite, key, "set things up")
        meta = json_result(out["response"])
        task_id = out["task_id"]
    finally:
        assert on_sqlite.stop() == 0, on_sqlite.logs()

    moved = db_copy(str(tmp_path / "data" / "mail.db"), pg_url, tmp_path)
    assert moved.returncode == 0, moved.stderr

    on_pg = ServerProcess(tmp_path, port, args=args, env={"DATABASE_URL": pg_url}).start()
    try:
        headers = auth(key)
        threads = httpx.get(f"{on_pg.base_url}/threads", headers=headers, timeout=10).json()
        assert [t["thread_id"] for t in threads["threads"]] == [state["tid"]]
        download = httpx.get(f"{on_pg.base_url}/attachments/{meta['id']}", headers=headers)
        assert download.status_code == 200 and download.content == b"moved bytes"
        tasks = httpx.get(f"{on_pg.base_url}/tasks", headers=headers, timeout=10).json()
        listed = list(tasks.values())  # task_id -> record
        assert len(listed) == 1 and listed[0]["completed"] is True, tasks
        assert listed[0]["task_id"] == task_id
    finally:
        assert on_pg.stop() == 0, on_pg.logs()


async def _fill_many(path: Path, events: int) -> None:
    tasks = SqliteTaskStore(path)
    await tasks.start()
    await tasks.upsert_task(KEY, {"task_id": "t1", "completed": True})
    for i in range(events):
        await tasks.append_event(KEY, "t1", {"event": "e", "data": "x" * 500, "id": i})
    await tasks.close()


async def test_an_interrupted_copy_leaves_the_target_empty_and_can_run_again(
    pg_url: str, tmp_path: Path
) -> None:
    source = tmp_path / "a.db"
    await _fill_many(source, 20_000)
    copy = subprocess.Popen(
        [sys.executable, "-m", "mail.cli", "db-copy", str(source), pg_url],
        cwd=tmp_path,
        env=server_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert copy.stdout is not None
    for line in copy.stdout:  # kill -9 once the events are half-way across
        if "task_events: 10000 row(s)" in line:
            break
    copy.kill()
    copy.wait(10)
    copy.stdout.close()

    again = db_copy(str(source), pg_url, tmp_path)  # not "already holds data"
    assert again.returncode == 0, again.stderr
    assert "task_events: 20000 row(s)" in again.stdout
    on_pg = PostgresTaskStore(pg_url)
    await on_pg.start()
    try:
        events = (await on_pg.load_instance(KEY)).events["t1"]
    finally:
        await on_pg.close()
    assert [e["id"] for e in events] == [str(i) for i in range(20_000)]


async def test_a_sqlite_file_in_use_is_refused_and_nothing_is_copied(tmp_path: Path) -> None:
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    await _fill(source)
    live = SqliteTaskStore(source)  # a server using the file
    await live.start()
    try:
        refused = db_copy(str(source), str(target), tmp_path)
    finally:
        await live.close()
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"Error: DatabaseInUseError: {source} is in use by another mail process "
        f"(pid {os.getpid()}); stop it first, or give this one its own [server.store] path"
    ]
    assert not target.exists()
    assert db_copy(str(source), str(target), tmp_path).returncode == 0


def test_a_mistyped_url_is_not_taken_for_a_file_name(tmp_path: Path) -> None:
    result = db_copy(str(tmp_path / "a.db"), "postgress://localhost/mail", tmp_path)
    assert (result.returncode, result.stderr.strip()) == (
        1,
        "Error: postgress:// is neither a PostgreSQL URL nor a SQLite file",
    )
    assert list(tmp_path.iterdir()) == []
