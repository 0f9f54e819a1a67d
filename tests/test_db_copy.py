"""`mail db-copy`: a SQLite database moves into PostgreSQL (and back) with nothing lost,
and a server on PostgreSQL serves what a server on SQLite stored."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
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
from mail.store.sqlite_schema import connect, migrate
from mail.store.team_base import PostgresTeamStore, SqliteTeamStore, TeamStore
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
    extra = team_config_extra(tmp_path) + '\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n'
    config = write_config(tmp_path, port=port, swarm=swarm, extra=extra)
    keyed = {**auth(key), "Idempotency-Key": "move-1"}

    args = ["--config", str(config)]
    on_sqlite = ServerProcess(tmp_path, port, args=args).start()
    try:
        hook = {"url": f"http://127.0.0.1:{free_port()}/hook", "events": ["*"]}
        made = httpx.post(f"{on_sqlite.base_url}/webhooks", json=hook, headers=auth(key))
        assert made.status_code == 201, made.text
        first = httpx.post(
            f"{on_sqlite.base_url}/message",
            json={"body": "set things up"},
            headers=keyed,
            timeout=120,
        )
        assert first.status_code == 200, first.text
        out = first.json()
        meta = json_result(out["response"])
        task_id = out["task_id"]
        listed_before = httpx.get(f"{on_sqlite.base_url}/webhooks", headers=auth(key)).json()
    finally:
        assert on_sqlite.stop() == 0, on_sqlite.logs()
    model_calls = len(llm[0].requests)

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
        # The webhook is still there (same record, secret included where it is shown) ...
        hooks = httpx.get(f"{on_pg.base_url}/webhooks", headers=headers, timeout=10).json()
        assert hooks == listed_before and len(hooks["webhooks"]) == 1, hooks
        # ... and a keyed retry is answered from the stored outcome, not run again.
        again = httpx.post(
            f"{on_pg.base_url}/message",
            json={"body": "set things up"},
            headers=keyed,
            timeout=120,
        )
        assert again.status_code == 200, again.text
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.json() == out
        assert len(llm[0].requests) == model_calls
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


_PUSH_ORDER = {  # table -> its primary key (the order rows are compared in)
    "webhook_subscriptions": "subscription_id",
    "webhook_events": "event_id",
    "webhook_deliveries": "delivery_id",
    "webhook_attempts": "delivery_id, attempt",
    "idempotency_keys": "swarm_name, caller_role, caller_id, idem_key",
}
_PUSH_ROWS: dict[str, list[dict[str, Any]]] = {
    "webhook_subscriptions": [
        {
            "subscription_id": "sub1",
            "swarm_name": "demo",
            "owner_role": "user",
            "owner_id": "alice",
            "kind": "standing",
            "scope": "own",
            "task_id": None,
            "url": "https://hooks.example/in",
            "destination": "hooks.example:443",
            "events": '["task.completed", "task.failed"]',
            "description": "ops",
            "active": 1,
            "disabled_reason": None,
            "secret": "whsec_bmV3LXNlY3JldC1ieXRlcy0wMTIzNDU2Nzg5",
            "previous_secret": "whsec_b2xkLXNlY3JldA==",
            "previous_secret_until": 1763990000.25,
            "push_token": None,
            "push_auth": None,
            "failing_since": 1763980000.5,
            "created_at": 1763900000.125,
            "updated_at": 1763950000.0,
            "expires_at": None,
        },
        {
            "subscription_id": "sub2",
            "swarm_name": "demo",
            "owner_role": "user",
            "owner_id": "alice",
            "kind": "a2a_push",
            "scope": "own",
            "task_id": "t1",
            "url": "https://push.example/a2a",
            "destination": "push.example:443",
            "events": '["*"]',
            "description": "",
            "active": 0,
            "disabled_reason": "gone",
            "secret": None,
            "previous_secret": None,
            "previous_secret_until": None,
            "push_token": "tok-1",
            "push_auth": '{"schemes": ["Bearer"], "credentials": "c"}',
            "failing_since": None,
            "created_at": 1763900001.0,
            "updated_at": 1763900001.0,
            "expires_at": 1764500000.75,
        },
    ],
    "webhook_events": [
        {
            "event_id": "ev-out",
            "swarm_name": "demo",
            "caller_role": "user",
            "caller_id": "alice",
            "task_id": "t1",
            "event_type": "task.completed",
            "payload": '{"task_id": "t1", "summary": "done \\u00e9"}',
            "created_at": 1763960000.0625,
        }
    ],
    "webhook_deliveries": [
        {
            "delivery_id": "msg_d1",
            "subscription_id": "sub1",
            "swarm_name": "demo",
            "event_id": "ev-0",
            "event_type": "task.completed",
            "task_id": "t2",
            "payload": '{"type": "task.completed", "data": {"task_id": "t2"}}',
            "status": "pending",
            "attempts": 1,
            "retry_index": 1,
            "next_attempt_at": 1763970000.5,
            "lease_owner": None,
            "lease_until": None,
            "last_status": 503,
            "last_error": "HTTP 503",
            "created_at": 1763960001.0,
            "updated_at": 1763960002.0,
            "finished_at": None,
        }
    ],
    "webhook_attempts": [
        {
            "delivery_id": "msg_d1",
            "attempt": 1,
            "started_at": 1763960001.5,
            "status_code": 503,
            "latency_ms": 12.375,
            "response_excerpt": "busy",
            "error": None,
            "outcome": "retry",
        }
    ],
    "idempotency_keys": [
        {
            "swarm_name": "demo",
            "caller_role": "user",
            "caller_id": "alice",
            "idem_key": "k-done",
            "fingerprint": "f" * 64,
            "subject": "t2",
            "context": '{"route": "message"}',
            "status": 200,
            "content_type": "application/json",
            "body": b'{"ok": true}\x00\xff',
            "holder": "host:1",
            "created_at": 1763960000.0,
            "expires_at": 1764046400.0,
        },
        {
            "swarm_name": "demo",
            "caller_role": "user",
            "caller_id": "alice",
            "idem_key": "k-running",
            "fingerprint": "e" * 64,
            "subject": None,
            "context": "{}",
            "status": None,
            "content_type": None,
            "body": None,
            "holder": "",
            "created_at": 1763960005.5,
            "expires_at": 1764046405.5,
        },
    ],
}


def _sqlite_push_rows(path: Path) -> dict[str, list[dict[str, Any]]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return {
            t: [dict(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY {order}")]
            for t, order in _PUSH_ORDER.items()
        }
    finally:
        conn.close()


async def test_webhooks_and_idempotency_keys_make_the_round_trip(
    pg_url: str, tmp_path: Path
) -> None:
    source = tmp_path / "a.db"
    await _fill(source)
    conn = connect(source)
    migrate(conn)
    with conn:
        for table, rows in _PUSH_ROWS.items():
            for row in rows:
                names = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(row.values()))
    conn.close()
    expected = _sqlite_push_rows(source)
    assert expected == _PUSH_ROWS  # each list is in its table's key order

    moved = db_copy(str(source), pg_url, tmp_path)
    assert moved.returncode == 0, moved.stderr
    for table, rows in _PUSH_ROWS.items():
        assert f"{table}: {len(rows)} row(s)" in moved.stdout, moved.stdout
    pg = await asyncpg.connect(pg_url)
    try:
        on_pg = {
            t: [dict(r) for r in await pg.fetch(f"SELECT * FROM {t} ORDER BY {order}")]
            for t, order in _PUSH_ORDER.items()
        }
        types = dict(
            await pg.fetch(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_name = 'webhook_subscriptions' AND table_schema = current_schema()"
            )
        )
    finally:
        await pg.close()
    assert types["active"] == "boolean" and types["created_at"] == "double precision"
    for rows in expected["webhook_subscriptions"]:
        rows["active"] = bool(rows["active"])  # 0/1 in SQLite, a boolean in PostgreSQL
    assert on_pg == expected
    secret = _PUSH_ROWS["webhook_subscriptions"][0]["secret"]
    assert on_pg["webhook_subscriptions"][0]["secret"] == secret  # receivers still verify

    back = tmp_path / "b.db"
    returned = db_copy(pg_url, f"sqlite:///{back}", tmp_path)
    assert returned.returncode == 0, returned.stderr
    for rows in expected["webhook_subscriptions"]:
        rows["active"] = int(rows["active"])
    assert _sqlite_push_rows(back) == expected
