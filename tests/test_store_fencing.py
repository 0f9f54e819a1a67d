"""Fencing of instance writes (cluster mode): a store that lost its instance's generation
must not overwrite the state of the instance that replaced it.

Two store objects on one database stand for two processes: the instance's old home (A, a
zombie after failover) and its new one (B). PostgreSQL tests use the real server in a
schema of their own; the memory variants share one `MemoryTaskStore` database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from tests.support.pg_schema import scratch_schema, with_search_path

from mail.store import InstanceKey, MemoryTaskStore, StoreUnavailableError, TaskStore
from mail.store.postgres import PostgresTaskStore

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
FAST = {"min_size": 1, "max_size": 3, "batch_delay": 0.005, "retry_initial": 0.05, "retry_max": 0.3}


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_fence", BASE_URL) as schema:
        yield with_search_path(BASE_URL, schema)


@contextlib.asynccontextmanager
async def direct(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_url, timeout=5)
    try:
        yield conn
    finally:
        await conn.close()


@dataclass
class Pair:
    old: TaskStore  # the process that loses its node (A)
    new: TaskStore  # the process the instance is restarted in (B)
    backend: str


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pair]:
    if request.param == "memory":
        shared = MemoryTaskStore()
        old: TaskStore = shared
        new: TaskStore = MemoryTaskStore(share_with=shared)
    elif request.param == "sqlite":
        from mail.store.sqlite import SqliteTaskStore

        # Two store objects on one file: what two processes sharing it would do.
        old = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
        new = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
    else:
        url = request.getfixturevalue("pg_url")
        old = PostgresTaskStore(url, application_name="mail-fence-a", **FAST)
        new = PostgresTaskStore(url, application_name="mail-fence-b", **FAST)
    await old.start()
    await new.start()
    yield Pair(old, new, request.param)
    await old.close()
    await new.close()


def new_key() -> InstanceKey:
    return InstanceKey(f"swarm-{uuid.uuid4().hex[:8]}", "user", f"id-{uuid.uuid4().hex[:8]}")


def event(name: str) -> dict[str, str]:
    return {"event": "new_message", "data": f'{{"from":"{name}"}}', "id": name}


# -- failover: the zombie's writes are dropped ---------------------------------------------


async def test_zombie_writes_after_failover_are_dropped(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = pair.old, pair.new
    key, other = new_key(), new_key()
    fenced_calls: list[InstanceKey] = []
    a.on_fenced = fenced_calls.append

    assert await a.claim_generation(key, holder="node-a") == 1
    assert a.held_generation(key) == 1
    await a.upsert_task(key, {"task_id": "t", "task_owner": "user:u", "title": "A"})
    await a.append_event(key, "t", event("a1"))
    await a.save_history(key, "t", "sup", None, [{"role": "user", "content": "from A"}])
    await a.save_queue(key, "t", [{"priority": 1, "seq": 1, "message": {"body": "A"}}])
    assert await a.flush(10)

    # Failover: B claims the next generation, then restores what A committed.
    assert await b.claim_generation(key, holder="node-b") == 2
    restored = await b.load_instance(key)
    assert restored.tasks["t"]["title"] == "A"
    assert [e["id"] for e in restored.events["t"]] == ["a1"]
    await b.upsert_task(key, {"task_id": "t", "title": "B", "is_running": True})
    await b.append_event(key, "t", event("b1"))
    await b.save_history(key, "t", "sup", None, [{"role": "user", "content": "from B"}])
    await b.save_response(key, "t", {"message": {"body": "B answered"}})
    assert await b.flush(10)

    # A does not know yet: every kind of write it still makes is refused.
    caplog.set_level(logging.WARNING, logger="mail.store.fencing")
    await a.upsert_task(key, {"task_id": "t", "title": "zombie", "is_running": False})
    await a.append_event(key, "t", event("zombie"))
    await a.save_history(key, "t", "sup", None, [{"role": "user", "content": "zombie"}])
    await a.save_response(key, "t", {"message": {"body": "zombie answer"}})
    await a.save_queue(key, "t", [{"priority": 1, "seq": 9, "message": {"body": "zombie"}}])
    await a.delete_queue(key, "t")
    # A key A never claimed is not fenced, even now.
    await a.upsert_task(other, {"task_id": "u", "title": "unfenced"})
    assert await a.flush(10)

    assert a.is_fenced(key) and not b.is_fenced(key)
    assert not a.is_fenced(other)
    assert fenced_calls == [key]
    assert a.fenced_writes == 6 and a.status()["fenced_writes"] == 6
    assert b.fenced_writes == 0 and b.status()["fenced_writes"] == 0
    warnings = [r for r in caplog.records if r.name == "mail.store.fencing"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING

    # Still fenced: counted, dropped, no second callback or warning.
    await a.append_event(key, "t", event("zombie-2"))
    assert await a.flush(10)
    assert a.fenced_writes == 7 and fenced_calls == [key]
    assert len([r for r in caplog.records if r.name == "mail.store.fencing"]) == 1

    # What a third process (or B after a restart) reads: B's state, untouched by A.
    for reader in (b, a):
        snap = await reader.load_instance(key)
        assert snap.tasks["t"]["title"] == "B" and snap.tasks["t"]["is_running"] is True
        assert [e["id"] for e in snap.events["t"]] == ["a1", "b1"]
        assert snap.histories[("t", "sup")] == [{"role": "user", "content": "from B"}]
        assert snap.responses["t"] == {"message": {"body": "B answered"}}
        # A's queue (written under its valid lease) is still there: the delete was refused.
        assert snap.queues["t"] == [{"priority": 1, "seq": 1, "message": {"body": "A"}}]
    assert (await a.load_instance(other)).tasks["u"]["title"] == "unfenced"

    # B keeps writing normally.
    await b.append_event(key, "t", event("b2"))
    assert await b.flush(10)
    assert [e["id"] for e in (await b.load_instance(key)).events["t"]] == ["a1", "b1", "b2"]
    assert b.fenced_writes == 0 and not b.is_fenced(key)


async def test_reclaim_by_the_same_store_keeps_its_writes(pair: Pair) -> None:
    store = pair.old
    key = new_key()
    assert await store.claim_generation(key) == 1
    await store.append_event(key, "t", event("before"))
    # Re-claiming (e.g. the owner restarts the instance in place) is not a failover:
    # what it wrote under the previous generation is kept, and it is not fenced.
    assert await store.claim_generation(key) == 2
    await store.append_event(key, "t", event("after"))
    assert await store.flush(10)
    assert [e["id"] for e in (await store.load_instance(key)).events["t"]] == ["before", "after"]
    assert not store.is_fenced(key) and store.fenced_writes == 0
    # Taking over the key again from the other store fences this one, and only this one.
    assert await pair.new.claim_generation(key) == 3
    await store.append_event(key, "t", event("late"))
    assert await store.flush(10)
    assert store.is_fenced(key) and store.fenced_writes == 1
    # A fresh claim lifts the fence: the store is the owner again.
    assert await store.claim_generation(key) == 4
    assert not store.is_fenced(key)
    await store.append_event(key, "t", event("back"))
    assert await store.flush(10)
    ids = [e["id"] for e in (await store.load_instance(key)).events["t"]]
    assert ids == ["before", "after", "back"]


async def test_a_failing_callback_does_not_break_the_writer(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = pair.old, pair.new
    key = new_key()

    def explode(_: InstanceKey) -> None:
        raise RuntimeError("owner went away")

    a.on_fenced = explode
    await a.claim_generation(key)
    await b.claim_generation(key)
    await a.append_event(key, "t", event("zombie"))
    assert await a.flush(10)
    assert a.is_fenced(key)
    assert any("on_fenced callback failed" in r.getMessage() for r in caplog.records)
    # The writer keeps serving other keys.
    other = new_key()
    await a.append_event(other, "t", event("fine"))
    assert await a.flush(10)
    assert [e["id"] for e in (await a.load_instance(other)).events["t"]] == ["fine"]


def test_memory_stores_without_sharing_are_independent() -> None:
    async def run() -> None:
        one, two = MemoryTaskStore(), MemoryTaskStore()
        await one.start()
        await two.start()
        key = new_key()
        assert await one.claim_generation(key) == 1
        assert await two.claim_generation(key) == 1  # its own counter: another "database"
        await one.append_event(key, "t", event("x"))
        assert not one.is_fenced(key)
        assert [e["id"] for e in (await one.load_instance(key)).events["t"]] == ["x"]

    asyncio.run(run())


# -- PostgreSQL: the table, the cost, and concurrency ------------------------------------------


async def test_claims_are_recorded_with_their_holder(pg_url: str) -> None:
    key = new_key()
    async with PostgresTaskStore(pg_url, **FAST) as store:
        assert await store.claim_generation(key, holder="node-1/pid-10") == 1
        assert await store.claim_generation(key, holder="node-2/pid-20") == 2
    async with direct(pg_url) as conn:
        row = await conn.fetchrow(
            "SELECT generation, holder, claimed_at FROM instance_generations"
            " WHERE swarm_name = $1 AND caller_role = $2 AND caller_id = $3",
            key.swarm_name,
            key.caller_role,
            key.caller_id,
        )
    assert row["generation"] == 2 and row["holder"] == "node-2/pid-20"
    assert row["claimed_at"] is not None


async def test_claiming_needs_a_started_store(pg_url: str) -> None:
    store = PostgresTaskStore(pg_url, **FAST)
    with pytest.raises(StoreUnavailableError):
        await store.claim_generation(new_key())


async def test_unclaimed_keys_never_touch_the_generation_table(pg_url: str) -> None:
    """Single-process mode pays nothing: with instance_generations locked exclusively by
    another session, writes for an unclaimed key still go through at once, while a
    claimed key's writes wait for the lock (they do read the table)."""
    free, leased = new_key(), new_key()
    async with PostgresTaskStore(pg_url, **FAST) as store:
        await store.claim_generation(leased)
        async with direct(pg_url) as locker:
            tx = locker.transaction()
            await tx.start()
            await locker.execute("LOCK TABLE instance_generations IN ACCESS EXCLUSIVE MODE")
            try:
                await store.upsert_task(free, {"task_id": "t", "title": "free"})
                await store.append_event(free, "t", event("free"))
                assert await store.flush(10), "an unclaimed key's writes waited for the table"
                await store.append_event(leased, "t", event("leased"))
                assert not await store.flush(0.5), "a claimed key's writes skipped the check"
            finally:
                await tx.rollback()
        assert await store.flush(10)
        assert (await store.load_instance(free)).tasks["t"]["title"] == "free"
        assert [e["id"] for e in (await store.load_instance(leased)).events["t"]] == ["leased"]
        assert store.fenced_writes == 0


async def _wait_for_lock_wait(pg_url: str, application_name: str) -> None:
    """Until a backend of that application waits on a lock (bounded)."""
    async with direct(pg_url) as conn:
        async with asyncio.timeout(10):
            while not await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = $1 AND wait_event_type = 'Lock'",
                application_name,
            ):
                await asyncio.sleep(0.01)


def _where(key: InstanceKey) -> tuple[str, tuple[str, str, str]]:
    return (
        "swarm_name = $1 AND caller_role = $2 AND caller_id = $3",
        (key.swarm_name, key.caller_role, key.caller_id),
    )


async def test_claim_waits_for_a_batch_in_flight(pg_url: str) -> None:
    """A's batch locked generation 1 before B's claim: the claim waits until the batch is
    committed, so A's writes land under generation 1 and B restores them."""
    key = new_key()
    where, args = _where(key)
    a = PostgresTaskStore(pg_url, application_name="mail-fence-batch", **FAST)
    b = PostgresTaskStore(pg_url, application_name="mail-fence-claim", **FAST)
    async with a, b:
        await a.claim_generation(key)
        await a.upsert_task(key, {"task_id": "t", "title": "A-1"})
        assert await a.flush(10)
        async with direct(pg_url) as blocker:
            # Hold A's next batch inside its transaction: it has taken the generation row
            # FOR SHARE and now waits for the task row that this session holds.
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute(f"SELECT 1 FROM tasks WHERE {where} FOR UPDATE", *args)
            await a.upsert_task(key, {"task_id": "t", "title": "A-2"})
            await a.append_event(key, "t", event("a2"))
            await _wait_for_lock_wait(pg_url, "mail-fence-batch")

            claim = asyncio.create_task(b.claim_generation(key, holder="b"))
            await _wait_for_lock_wait(pg_url, "mail-fence-claim")
            assert not claim.done()
            await tx.rollback()
            assert await claim == 2
        assert await a.flush(10)
        assert not a.is_fenced(key) and a.fenced_writes == 0
        snap = await b.load_instance(key)
        assert snap.tasks["t"]["title"] == "A-2"
        assert [e["id"] for e in snap.events["t"]] == ["a2"]
        # From now on A is the zombie.
        await a.upsert_task(key, {"task_id": "t", "title": "A-3"})
        assert await a.flush(10)
        assert a.is_fenced(key) and a.fenced_writes == 1
        assert (await b.load_instance(key)).tasks["t"]["title"] == "A-2"


@pytest.mark.parametrize("claim_commits", [True, False])
async def test_batch_waits_for_a_claim_in_flight(pg_url: str, claim_commits: bool) -> None:
    """A claim holds the generation row (uncommitted) when A's batch starts: the batch
    waits for it, then applies or drops its writes by the outcome of the claim."""
    key = new_key()
    where, args = _where(key)
    fenced_calls: list[InstanceKey] = []
    async with PostgresTaskStore(pg_url, application_name="mail-fence-zombie", **FAST) as a:
        a.on_fenced = fenced_calls.append
        await a.claim_generation(key)
        async with direct(pg_url) as claimer:
            # The claim statement of another process, caught before its commit.
            tx = claimer.transaction()
            await tx.start()
            generation = await claimer.fetchval(
                "UPDATE instance_generations SET generation = generation + 1"
                f" WHERE {where} RETURNING generation",
                *args,
            )
            assert generation == 2
            await a.upsert_task(key, {"task_id": "t", "title": "zombie?"})
            flushed = asyncio.create_task(a.flush(10))
            await _wait_for_lock_wait(pg_url, "mail-fence-zombie")
            assert not flushed.done()
            if claim_commits:
                await tx.commit()
            else:
                await tx.rollback()
            assert await flushed
        snap = await a.load_instance(key)
        if claim_commits:
            assert snap.tasks == {}
            assert a.is_fenced(key) and a.fenced_writes == 1 and fenced_calls == [key]
        else:
            assert snap.tasks["t"]["title"] == "zombie?"
            assert not a.is_fenced(key) and a.fenced_writes == 0 and fenced_calls == []


async def test_an_earlier_claim_answered_late_does_not_fence_the_store(pg_url: str) -> None:
    """Two claims of one key by one store at once (a start-up resume and a caller's first
    request): whichever answer comes back last, the store holds the newer generation and its
    writes are kept (an older one would have every write dropped as a zombie's)."""
    store = PostgresTaskStore(pg_url, application_name="mail-fence-late", **FAST)
    await store.start()
    try:
        fetch = store._fetch_claim  # the statement's round trip; the first answer is delayed
        first = asyncio.Event()

        async def late_first(*args: object) -> object:
            result = await fetch(*args)  # type: ignore[arg-type]
            if not first.is_set():
                first.set()
                await asyncio.sleep(0.2)  # answered after the second claim's answer
            return result

        store._fetch_claim = late_first  # type: ignore[method-assign]
        key = new_key()
        early, late = await asyncio.gather(
            store.claim_generation(key, holder="resume"),
            store.claim_generation(key, holder="request"),
        )
        assert {early, late} == {1, 2}
        assert store.held_generation(key) == 2
        await store.append_event(key, "t", event("kept"))
        assert await store.flush(10)
        assert not store.is_fenced(key) and store.fenced_writes == 0
        assert [e["id"] for e in (await store.load_instance(key)).events["t"]] == ["kept"]
    finally:
        await store.close()
