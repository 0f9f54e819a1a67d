"""The lifecycle of stored tasks (mail.store.lifecycle) on memory, SQLite and PostgreSQL:
reading one task back, listing, measuring, summaries, batched removal of expired finished
tasks; team retention; SQLite giving space back."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.pg_schema import scratch_schema, with_search_path
from tests.test_store_postgres import BASE_URL, FAST, new_key

from mail.store import InstanceKey, MemoryTaskStore, TaskStore, lifecycle_for
from mail.store.lifecycle import PRUNE_BATCH, TaskLifecycle, cutoff_for
from mail.store.postgres import PostgresTaskStore
from mail.store.sqlite import SqliteTaskStore
from mail.store.team_base import SqliteTeamStore, TeamStore

STORES = ["memory", "sqlite", "postgres"]


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_lifecycle", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    if request.param == "memory":
        s: TaskStore = MemoryTaskStore()
    elif request.param == "sqlite":
        s = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
    else:
        s = PostgresTaskStore(request.getfixturevalue("pg_url"), **FAST)
    await s.start()
    yield s
    await s.close()


def lifecycle(store: TaskStore) -> TaskLifecycle:
    found = lifecycle_for(store)
    assert found is not None
    return found


async def add_task(
    store: TaskStore, key: InstanceKey, task_id: str, *, state: str = "completed", size: int = 10
) -> None:
    running = state == "running"
    await store.upsert_task(
        key,
        {
            "task_id": task_id,
            "task_owner": "user:u@demo",
            "is_running": running,
            "completed": state in ("completed", "failed"),
            "state": state,
            "start_time": "2025-03-01T10:00:00+00:00",
        },
    )
    await store.append_event(key, task_id, {"event": "new_message", "data": "e" * size, "id": "1"})
    await store.append_event(key, task_id, {"event": "task_complete", "data": "{}", "id": "2"})
    await store.save_history(key, task_id, "supervisor", None, [{"role": "user", "content": "h"}])
    await store.save_response(key, task_id, {"message": {"body": "done"}})
    await store.save_queue(key, task_id + "::journal", [{"kind": "mailbox", "priority": 1}])


async def test_one_task_is_read_back_whole(store: TaskStore) -> None:
    key, other = new_key(), new_key()
    for task_id in ("a", "b"):
        await add_task(store, key, task_id)
    await add_task(store, other, "a")
    life = lifecycle(store)
    snap = await life.load_tasks(key, ["a"])
    assert set(snap.tasks) == {"a"} and snap.tasks["a"]["state"] == "completed"
    assert [e["id"] for e in snap.events["a"]] == ["1", "2"]
    assert snap.histories == {("a", "supervisor"): [{"role": "user", "content": "h"}]}
    assert snap.responses == {"a": {"message": {"body": "done"}}}
    assert set(snap.queues) == {"a::journal"}
    records = await life.records(key)
    assert list(records) == ["a", "b"] and records["a"]["event_count"] == 2
    assert sorted(k.caller_id for k in await life.owners("a")) == sorted(
        [key.caller_id, other.caller_id]
    )
    # The callers of a role with stored tasks (an admin's listing of remote swarms' tasks).
    same = InstanceKey(key.swarm_name, key.caller_role, "another")
    await add_task(store, same, "c")
    assert sorted(await life.callers(key.swarm_name, key.caller_role)) == sorted(
        [key.caller_id, "another"]
    )
    assert await life.callers(key.swarm_name, "no-such-role") == []


async def test_running_callers_are_the_instances_a_restart_resumes(store: TaskStore) -> None:
    swarm = f"resume-{new_key().caller_id}"
    waits, done, runs, later = (InstanceKey(swarm, "user", n) for n in ("w", "d", "r", "l"))
    await add_task(store, waits, "paused", state="waiting_for_breakpoint")
    await add_task(store, done, "over", state="completed")
    await add_task(store, runs, "busy", state="running")
    await add_task(store, later, "busy", state="running")
    await store.upsert_task(later, {"task_id": "busy", "start_time": "2025-03-02T10:00:00+00:00"})
    await add_task(store, InstanceKey(swarm + "-other", "user", "x"), "busy", state="running")
    life = lifecycle(store)
    # Paused and finished tasks stay where they are; the oldest running task comes first.
    assert await life.running_callers(swarm, 10) == [runs, later]
    assert await life.running_callers(swarm, 1) == [runs]


async def test_sizes_and_summaries(store: TaskStore) -> None:
    key = new_key()
    await add_task(store, key, "small", size=10)
    await add_task(store, key, "large", size=100_000)
    life = lifecycle(store)
    sizes = await life.task_bytes(key, ["small", "large", "missing"])
    assert sizes["missing"] == 0
    assert 100_000 < sizes["large"] < 100_000 + 2_000
    assert sizes["large"] - sizes["small"] == 100_000 - 10
    await life.save_summaries(key, {"large": {"answer": "done", "stored_bytes": sizes["large"]}})
    await life.save_summaries(key, {"gone": {"answer": "nothing"}})  # no such task: skipped
    records = await life.records(key)
    assert records["large"]["summary"] == {"answer": "done", "stored_bytes": sizes["large"]}
    assert "gone" not in records and "summary" not in records["small"]


async def test_prune_removes_expired_finished_tasks_in_batches(store: TaskStore) -> None:
    key, bystander = new_key(), new_key()
    count = PRUNE_BATCH + 7
    for n in range(count):
        await add_task(store, key, f"done-{n}")
    await add_task(store, key, "stopped", state="stopped")
    await add_task(store, key, "failed", state="failed")  # ended on an error: finished too
    await add_task(store, key, "running", state="running")
    await add_task(store, key, "paused", state="waiting_for_breakpoint")
    await add_task(store, bystander, "mine")
    life = lifecycle(store)
    # Nothing finished before an hour ago.
    assert (await life.prune(cutoff_for(3600))).tasks == []
    report = await life.prune(cutoff_for(0, dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)))
    removed = {(k.caller_id, t) for k, t in report.tasks}
    assert report.batches >= 2  # no transaction removes more than one batch
    assert {t for c, t in removed if c == key.caller_id} == {
        *(f"done-{n}" for n in range(count)),
        "stopped",
        "failed",
    }
    assert (bystander.caller_id, "mine") in removed
    left = await life.load_tasks(key, ["running", "paused", "done-0", "stopped"])
    assert set(left.tasks) == {"running", "paused"}
    assert set(left.queues) == {"running::journal", "paused::journal"}
    assert set(left.events) == {"running", "paused"}
    assert report.rows >= 5 * (count + 2)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def team_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TeamStore]:
    if request.param == "memory":
        t: TeamStore = SqliteTeamStore()
        await t.start()
        yield t
        return
    if request.param == "sqlite":
        t = SqliteTeamStore(tmp_path / "mail.db")
    else:
        from mail.store.team_base import PostgresTeamStore

        t = PostgresTeamStore(request.getfixturevalue("pg_url"))
    await t.start()
    yield t
    await t.close()


def _iso(delta: float) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=delta)).isoformat()


async def test_team_rows_expire_by_age(team_store: TeamStore) -> None:
    key = new_key()
    old, new = _iso(-7200), _iso(0)
    thread: dict[str, Any] = {"thread_id": "th-old", "created_at": old, "updated_at": old}
    await team_store.save_thread(key, thread)
    await team_store.save_thread(key, {"thread_id": "th-new", "created_at": new, "updated_at": new})
    await team_store.add_post(key, {"thread_id": "th-old", "post_id": "p1", "timestamp": old})
    await team_store.add_post(key, {"thread_id": "th-new", "post_id": "p2", "timestamp": new})
    entry = {"agent": "a", "kind": "direct", "timestamp": old, "entry_id": "e1"}
    await team_store.add_inbox_entries(key, [entry, {**entry, "entry_id": "e2", "timestamp": new}])
    await team_store.put_attachment(
        key, {"attachment_id": "f1", "size": 5, "created_at": old}, b"hello"
    )
    size = await team_store.stored_bytes(key)
    assert size > 5
    removed = await team_store.prune_before(cutoff_for(3600))
    # p1, e1 and the old thread; the attachment was stored now (its row's time), not then,
    # except in memory, where the record's time is the one there is.
    assert removed in (3, 4)
    assert [t["thread_id"] for _, t in await team_store.list_threads(key)] == ["th-new"]
    assert [e["entry_id"] for e in await team_store.inbox(key, "a")] == ["e2"]
    assert await team_store.thread_posts(key, "th-old") == []
    assert await team_store.stored_bytes(key) < size


async def _add_team_rows(
    team: TeamStore, key: InstanceKey, thread_id: str, tag: str, task_id: str | None, old: str
) -> None:
    """A post in `thread_id`, an inbox entry of agent "a" and a 1-byte upload, all of
    `task_id` and dated `old`; their ids are p-, e- and f-`tag`."""
    await team.add_post(
        key, {"thread_id": thread_id, "post_id": f"p-{tag}", "timestamp": old, "task_id": task_id}
    )
    entry = {"agent": "a", "kind": "direct", "timestamp": old, "entry_id": f"e-{tag}"}
    await team.add_inbox_entries(key, [{**entry, "task_id": task_id}])
    await team.put_attachment(
        key, {"attachment_id": f"f-{tag}", "size": 1, "created_at": old, "task_id": task_id}, b"x"
    )


@pytest.mark.parametrize("kind", STORES)
async def test_team_rows_of_a_running_or_waiting_task_outlive_the_ttl(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Retention keeps the posts, inbox entries and uploads of a task that still runs or
    waits (paused for a review): the task may need them. Its finished neighbour's go."""
    team: TeamStore
    tasks: TaskStore
    if kind == "memory":
        tasks, team = MemoryTaskStore(), SqliteTeamStore()
    elif kind == "sqlite":
        tasks = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
        team = SqliteTeamStore(tmp_path / "mail.db")
    else:
        from mail.store.team_base import PostgresTeamStore

        url = request.getfixturevalue("pg_url")
        tasks, team = PostgresTaskStore(url, **FAST), PostgresTeamStore(url)
    await tasks.start()
    await team.start()
    try:
        key, other = new_key(), new_key()
        await add_task(tasks, key, "t-paused", state="paused")
        await add_task(tasks, key, "t-running", state="running")
        await add_task(tasks, key, "t-done", state="completed")
        # Another instance's task of the same id does not keep this instance's rows.
        await add_task(tasks, other, "t-done-elsewhere", state="paused")
        assert await tasks.flush(timeout=10)
        old = _iso(-7200)
        for task_id in ("t-paused", "t-running", "t-done", "t-done-elsewhere", None):
            tag = task_id or "none"
            await team.save_thread(
                key, {"thread_id": f"th-{tag}", "created_at": old, "updated_at": old}
            )
            await _add_team_rows(team, key, f"th-{tag}", tag, task_id, old)
        live = [(key, "t-paused"), (key, "t-running"), (other, "t-done-elsewhere")]
        # A cutoff ahead of now: every row is older than it (the SQL stores date an upload by
        # when it was stored).
        cutoff = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        await team.prune_before(cutoff, live if kind == "memory" else ())
        kept = ["t-paused", "t-running"]
        threads = sorted(t["thread_id"] for _, t in await team.list_threads(key))
        assert threads == [f"th-{t}" for t in kept]
        assert sorted(e["entry_id"] for e in await team.inbox(key, "a")) == [f"e-{t}" for t in kept]
        for tag in ("t-paused", "t-running", "t-done", "t-done-elsewhere", "none"):
            found = await team.get_attachment(key, f"f-{tag}", with_data=False)
            assert (found is not None) == (tag in kept), tag
            posts = await team.thread_posts(key, f"th-{tag}")
            assert [p["post_id"] for p in posts] == ([f"p-{tag}"] if tag in kept else []), tag
    finally:
        await team.close()
        await tasks.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_team_rows_of_a_finished_task_stay_while_the_task_does(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A task that ran (or waited) longer than the TTL and finished just now is kept for the
    TTL from now; its old posts, inbox entries and uploads went at the next round, so
    `GET /task` listed an upload that answered 404. A task finished before the cutoff still
    loses them."""
    team: TeamStore
    tasks: TaskStore
    if kind == "sqlite":
        tasks = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
        team = SqliteTeamStore(tmp_path / "mail.db")
    else:
        from mail.store.team_base import PostgresTeamStore

        url = request.getfixturevalue("pg_url")
        tasks, team = PostgresTaskStore(url, **FAST), PostgresTeamStore(url)
    await tasks.start()
    await team.start()
    try:
        key = new_key()
        await add_task(tasks, key, "t-just-done", state="completed")
        await add_task(tasks, key, "t-long-done", state="completed")
        assert await tasks.flush(timeout=10)
        old = _iso(-7200)
        for task_id in ("t-just-done", "t-long-done"):
            await _add_team_rows(team, key, "th", task_id, task_id, old)
        # t-long-done last changed before the cutoff; t-just-done after it (now).
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
        if kind == "sqlite":
            import sqlite3

            with sqlite3.connect(tmp_path / "mail.db") as conn:
                conn.execute(
                    "UPDATE tasks SET updated_at = ? WHERE task_id = 't-long-done'", (old,)
                )
                # Uploads are dated by when they were stored: as old as the rest here.
                conn.execute("UPDATE team_attachments SET created_at = ?", (old,))
        else:
            import asyncpg

            conn = await asyncpg.connect(url)
            try:
                await conn.execute(
                    "UPDATE tasks SET updated_at = $1::text::timestamptz"
                    " WHERE task_id = 't-long-done'",
                    old,
                )
                await conn.execute(
                    "UPDATE team_attachments SET created_at = $1::text::timestamptz", old
                )
            finally:
                await conn.close()
        await team.prune_before(cutoff)
        posts = [p["post_id"] for p in await team.thread_posts(key, "th")]
        assert posts == ["p-t-just-done"], posts
        assert [e["entry_id"] for e in await team.inbox(key, "a")] == ["e-t-just-done"]
        assert await team.get_attachment(key, "f-t-just-done", with_data=False) is not None
        assert await team.get_attachment(key, "f-t-long-done", with_data=False) is None
    finally:
        await team.close()
        await tasks.close()


async def test_sqlite_gives_freed_space_back(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
    await store.start()
    try:
        key = new_key()
        for n in range(20):
            await add_task(store, key, f"t{n}", size=200_000)
        life = lifecycle(store)
        grown = (await life.space()).file_bytes
        assert (await life.space()).auto_vacuum == "incremental"
        await life.prune(cutoff_for(0, dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)))
        assert (await life.space()).free_bytes > grown // 2
        returned = await life.reclaim_space()
        assert returned > grown // 2
        assert (await life.space()).file_bytes < grown // 4
    finally:
        await store.close()


async def test_sqlite_file_of_an_older_version_is_switched_when_small(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE filler (x)")  # auto_vacuum NONE, as older versions made it
    conn.commit()
    conn.close()
    store = SqliteTaskStore(path)
    await store.start()
    try:
        assert (await lifecycle(store).space()).auto_vacuum == "incremental"
    finally:
        await store.close()
