"""SQLite counts the bytes of the tasks it inserted as it writes them (mail.store.sqlite_sizes):
the counts equal what the size query over the task's rows returns, for random task shapes,
and tasks the store did not insert (in the file before, summaries saved, pruned, past the
bound) are measured by the query."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest

from mail.store import InstanceKey, lifecycle_for, lifecycle_sqlite
from mail.store.lifecycle import TaskLifecycle
from mail.store.sqlite import SqliteTaskStore

TEXTS = ["", "a", "é", "日本語テキスト", "emoji 🎉 and \u2028", "x" * 300, '"quoted" \\ back']


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4)))


def _lifecycle(store: SqliteTaskStore) -> TaskLifecycle:
    found = lifecycle_for(store)
    assert found is not None
    return found


async def _queried(store: SqliteTaskStore, key: InstanceKey, ids: list[str]) -> dict[str, int]:
    """What the size query over the task's rows says (the one task_bytes falls back to)."""
    await store.flush(10)
    args = (key.swarm_name, key.caller_role, key.caller_id)
    return await store.db.run(lifecycle_sqlite._sizes, args, ids)  # type: ignore[no-any-return]


async def _random_writes(
    store: SqliteTaskStore, rng: random.Random, key: InstanceKey, ids: list[str], steps: int
) -> None:
    created: set[str] = set()
    for _ in range(steps):
        task_id = rng.choice(ids)
        if task_id not in created:  # the runtime writes a new task's record first
            created.add(task_id)
            await store.upsert_task(
                key,
                {"task_id": task_id, "task_owner": "user:u", "is_running": True, "x": _text(rng)},
            )
            continue
        what = rng.randrange(9)
        if what == 0:
            extra = {rng.choice("abcdef"): _text(rng) for _ in range(rng.randint(0, 3))}
            await store.upsert_task(
                key, {"task_id": task_id, "completed": rng.random() < 0.5, **extra}
            )
        elif what in (1, 2):
            data: Any = rng.choice([_text(rng), {"m": _text(rng)}, None])
            await store.append_event(key, task_id, {"event": "e", "data": data, "id": "1"})
        elif what == 3:
            history = [{"role": "user", "content": _text(rng)} for _ in range(rng.randint(0, 3))]
            agent = rng.choice(["supervisor", "worker", "ワーカー"])
            await store.save_history(key, task_id, agent, None, history)
        elif what == 4:
            await store.save_response(key, task_id, {"message": {"body": _text(rng)}})
        elif what in (5, 6):
            queue = task_id + rng.choice(["", "::journal"])
            items = [{"kind": "mailbox", "body": _text(rng)} for _ in range(rng.randint(0, 2))]
            if items:
                await store.save_queue(key, queue, items)
            else:
                await store.delete_queue(key, queue)
        elif what == 7:
            await store.flush(10)  # the next writes land in another batch
        else:
            assert store.write_nowait(key, "append_event", task_id, {"event": "n", "data": "é"})


@pytest.mark.parametrize("seed", range(6))
async def test_counted_sizes_equal_the_size_query(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    store = SqliteTaskStore(tmp_path / "mail.db", batch_delay=rng.choice([0.0, 0.002, 0.01]))
    await store.start()
    try:
        keys = [InstanceKey("s", "user", f"u{n}") for n in range(2)]
        ids = [f"t{n}" for n in range(5)]
        for key in keys:
            await _random_writes(store, rng, key, ids, 150)
        life = _lifecycle(store)
        for key in keys:
            counted = await life.task_bytes(key, ids)
            assert counted == await _queried(store, key, ids)
            # The tasks were inserted by this store: every one of them was counted.
            instance = (key.swarm_name, key.caller_role, key.caller_id)
            assert set(store.task_sizes.known(instance, ids)) == set(ids)
    finally:
        await store.close()


async def test_tasks_the_store_inserted_are_not_queried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.002)
    await store.start()
    try:
        key = InstanceKey("s", "user", "u")
        await _random_writes(store, random.Random(7), key, ["a", "b", "c"], 60)
        expected = await _queried(store, key, ["a", "b", "c"])
        asked: list[list[str]] = []
        real = lifecycle_sqlite._sizes

        def spy(conn: Any, instance: Any, ids: list[str]) -> dict[str, int]:
            asked.append(list(ids))
            return real(conn, instance, ids)

        monkeypatch.setattr(lifecycle_sqlite, "_sizes", spy)
        life = _lifecycle(store)
        assert await life.task_bytes(key, ["a", "b", "c"]) == expected
        assert asked == []
        # A task id the store never wrote is still asked for (and is 0).
        assert await life.task_bytes(key, ["a", "nope"]) == {"a": expected["a"], "nope": 0}
        assert asked == [["nope"]]
    finally:
        await store.close()


async def test_tasks_the_store_did_not_insert_are_measured(tmp_path: Path) -> None:
    """In the file before (a restart), summary saved, pruned and made again, past the bound:
    measured by the query, and still right after more writes."""
    path = tmp_path / "mail.db"
    key = InstanceKey("s", "user", "u")
    rng = random.Random(11)
    store = SqliteTaskStore(path, batch_delay=0.002)
    await store.start()
    await _random_writes(store, rng, key, ["old", "sum"], 60)
    await store.close()

    store = SqliteTaskStore(path, batch_delay=0.002)
    await store.start()
    try:
        life = _lifecycle(store)
        instance = (key.swarm_name, key.caller_role, key.caller_id)
        await store.upsert_task(key, {"task_id": "old", "is_running": True, "y": "après"})
        await store.append_event(key, "old", {"event": "e", "data": "after a restart"})
        await store.save_history(key, "old", "supervisor", None, [{"content": "again"}])
        await _random_writes(store, rng, key, ["new"], 40)
        ids = ["old", "sum", "new"]
        assert await life.task_bytes(key, ids) == await _queried(store, key, ids)
        assert set(store.task_sizes.known(instance, ids)) == {"new"}

        # A saved summary changes the record: no longer counted, measured right.
        await life.save_summaries(key, {"new": {"event_count": 3, "note": "日本"}})
        await store.append_event(key, "new", {"event": "e", "data": "brought back"})
        assert store.task_sizes.known(instance, ["new"]) == {}
        assert await life.task_bytes(key, ids) == await _queried(store, key, ids)

        # Pruned, then a task of the same id made again: counted from nothing.
        await store.upsert_task(key, {"task_id": "new", "is_running": False, "state": "stopped"})
        await store.flush(10)
        report = await life.prune(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5))
        assert (key, "new") in report.tasks
        await _random_writes(store, rng, key, ["new"], 30)
        assert await life.task_bytes(key, ["new"]) == await _queried(store, key, ["new"])
        assert set(store.task_sizes.known(instance, ["new"])) == {"new"}

        # Past the bound the oldest are let go, and measured by the query.
        store.task_sizes.max_tracked = 2
        await _random_writes(store, rng, key, ["p", "q", "r"], 40)
        assert len(store.task_sizes) <= 2
        ids = ["old", "sum", "new", "p", "q", "r"]
        assert await life.task_bytes(key, ids) == await _queried(store, key, ids)
    finally:
        await store.close()
