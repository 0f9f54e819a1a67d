"""TeamStore contract, for the in-memory, SQLite and PostgreSQL store alike (threads, posts,
inbox filters and flags, unread counts, attachments, instance isolation)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.support.pg_schema import scratch_schema, with_search_path

from mail.store.base import InstanceKey
from mail.store.team_base import SqliteTeamStore, TeamStore

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
KEY = InstanceKey("s", "user", "alice")
OTHER = InstanceKey("s", "user", "bob")


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_team", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TeamStore]:
    if request.param == "sqlite":
        lite = SqliteTeamStore(tmp_path / "mail.db")
        await lite.start()
        yield lite
        await lite.close()
        return
    if request.param == "postgres":
        from mail.store.team_base import PostgresTeamStore

        pg = PostgresTeamStore(request.getfixturevalue("pg_url"))
        await pg.start()
        yield pg
        async with pg.pool.acquire() as conn:
            for table in ("team_threads", "team_posts", "team_inbox", "team_attachments"):
                await conn.execute(f"DELETE FROM {table}")
        await pg.close()
        return
    yield SqliteTeamStore()  # in memory: ready without start


def entry(agent: str, entry_id: str, ts: str, thread: str | None = None) -> dict[str, object]:
    return {
        "entry_id": entry_id,
        "agent": agent,
        "kind": "thread" if thread else "direct",
        "thread_id": thread,
        "sender": "lead",
        "subject": "",
        "body": f"body {entry_id}",
        "task_id": "t1",
        "timestamp": ts,
        "read": False,
        "shown": False,
        "attachments": [],
    }


async def test_threads_and_posts(store: TeamStore) -> None:
    thread = {
        "thread_id": "th_1",
        "title": "Plan",
        "creator": "lead",
        "participants": ["lead", "a"],
        "created_at": "2025-01-01T00:00:00+00:00",
        "updated_at": "2025-01-01T00:00:00+00:00",
    }
    await store.save_thread(KEY, thread)
    thread["participants"].append("b")  # type: ignore[attr-defined]
    await store.save_thread(KEY, thread)
    assert (await store.get_thread(KEY, "th_1"))["participants"] == ["lead", "a", "b"]  # type: ignore[index]
    assert await store.get_thread(OTHER, "th_1") is None
    assert [t["thread_id"] for _, t in await store.list_threads(KEY)] == ["th_1"]
    assert await store.list_threads(OTHER) == []
    everywhere = [k for k, _ in await store.list_threads(None)]
    assert KEY in everywhere
    for n in range(3):
        await store.add_post(KEY, {"post_id": f"p{n}", "thread_id": "th_1", "body": str(n)})
    assert [p["body"] for p in await store.thread_posts(KEY, "th_1")] == ["0", "1", "2"]
    assert [p["body"] for p in await store.thread_posts(KEY, "th_1", 2)] == ["1", "2"]


async def test_inbox_filters_flags_and_counts(store: TeamStore) -> None:
    await store.add_inbox_entries(
        KEY,
        [
            entry("a", "m1", "2025-01-01T00:00:01+00:00"),
            entry("a", "m2", "2025-01-01T00:00:02+00:00", "th_1"),
            entry("a", "m3", "2025-01-01T00:00:03+00:00", "th_1"),
            entry("b", "m4", "2025-01-01T00:00:04+00:00", "th_1"),
        ],
    )
    newest_first = await store.inbox(KEY, "a")
    assert [e["entry_id"] for e in newest_first] == ["m3", "m2", "m1"]
    assert [e["entry_id"] for e in await store.inbox(KEY, "a", thread_id="th_1")] == ["m3", "m2"]
    since = await store.inbox(KEY, "a", since="2025-01-01T00:00:01+00:00")
    assert [e["entry_id"] for e in since] == ["m3", "m2"]
    assert [e["entry_id"] for e in await store.inbox(KEY, "a", limit=1)] == ["m3"]
    await store.mark(KEY, "a", ["m3"], field="shown")
    unshown = await store.inbox(KEY, "a", unshown_only=True)
    assert [e["entry_id"] for e in unshown] == ["m2", "m1"]
    assert await store.unread_counts(KEY) == {"a": {"direct": 1, "th_1": 2}, "b": {"th_1": 1}}
    await store.mark(KEY, "a", ["m2"], field="read")
    # The unread ones, oldest first: the queue an outside agent drains (the limit keeps
    # the oldest); one entry by its id.
    unread = await store.inbox(KEY, "a", unread_only=True, oldest_first=True, limit=1)
    assert [e["entry_id"] for e in unread] == ["m1"]
    unread = await store.inbox(KEY, "a", unread_only=True)
    assert [e["entry_id"] for e in unread] == ["m3", "m1"]
    assert [e["entry_id"] for e in await store.inbox(KEY, "a", oldest_first=True)] == [
        "m1",
        "m2",
        "m3",
    ]
    [one] = await store.inbox(KEY, "a", entry_id="m2")
    assert one["body"] == "body m2" and one["read"] is True
    assert await store.inbox(KEY, "b", entry_id="m2") == []
    await store.mark(KEY, "a", ["m1"], field="read")
    assert (await store.inbox(KEY, "a"))[1]["read"] is True
    assert await store.unread_counts(KEY, "th_1") == {"a": {"th_1": 1}, "b": {"th_1": 1}}
    assert await store.inbox(OTHER, "a") == []


async def test_limits_keep_the_newest_posts_and_entries(store: TeamStore) -> None:
    store.max_posts_per_thread = 2
    store.max_inbox_entries = 3
    for n in range(5):
        await store.add_post(KEY, {"post_id": f"p{n}", "thread_id": "th_1", "body": str(n)})
        await store.add_post(OTHER, {"post_id": f"q{n}", "thread_id": "th_1", "body": str(n)})
    await store.add_post(KEY, {"post_id": "x", "thread_id": "th_2", "body": "other thread"})
    assert [p["body"] for p in await store.thread_posts(KEY, "th_1")] == ["3", "4"]
    assert [p["body"] for p in await store.thread_posts(OTHER, "th_1")] == ["3", "4"]
    assert [p["body"] for p in await store.thread_posts(KEY, "th_2")] == ["other thread"]
    for n in range(5):
        ts = f"2025-01-01T00:00:0{n}+00:00"
        await store.add_inbox_entries(KEY, [entry("a", f"a{n}", ts), entry("b", f"b{n}", ts)])
    assert [e["entry_id"] for e in await store.inbox(KEY, "a")] == ["a4", "a3", "a2"]
    assert [e["entry_id"] for e in await store.inbox(KEY, "b")] == ["b4", "b3", "b2"]


async def test_attachments(store: TeamStore) -> None:
    record = {"attachment_id": "att_1", "filename": "x.bin", "size": 3, "sha256": "abc"}
    await store.put_attachment(KEY, record, b"\x00\x01\x02")
    found = await store.get_attachment(KEY, "att_1")
    assert found is not None and found[0]["filename"] == "x.bin" and found[1] == b"\x00\x01\x02"
    meta = await store.get_attachment(KEY, "att_1", with_data=False)
    assert meta is not None and meta[1] == b""
    assert await store.get_attachment(OTHER, "att_1") is None
    assert await store.get_attachment(KEY, "att_2") is None
