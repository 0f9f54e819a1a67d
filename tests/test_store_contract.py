"""The TaskStore contract, run against every store: memory, SQLite and PostgreSQL.

PostgreSQL uses the real server (MAIL_TEST_DATABASE_URL, default
postgresql://postgres@127.0.0.1:5432/test) in a schema of its own, dropped at the end;
SQLite a file in the test's tmp_path. What is specific to one store stays in its own file
(test_store_memory.py, test_store_postgres.py, test_store_sqlite.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.pg_schema import scratch_schema, with_search_path
from tests.test_store_postgres import BASE_URL, FAST, TASK, new_key

from mail.store import MemoryTaskStore, TaskStore
from mail.store.postgres import PostgresTaskStore
from mail.store.sqlite import SqliteTaskStore

STORES = ["memory", "sqlite", "postgres"]


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_schema("mail_contract", BASE_URL) as schema:
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


# -- contract: every implementation -----------------------------------------------------------


async def test_round_trip_of_every_method(store: TaskStore) -> None:
    key = new_key()
    await store.upsert_task(key, {**TASK, "breakpoint_calls": [{"call_id": "c1"}]})
    for i in range(3):
        await store.append_event(
            key, "t-1", {"event": "new_message", "data": f'{{"i":{i}}}', "id": str(i)}
        )
    history = [{"role": "system", "content": "You are helpful"}, {"role": "user", "content": "hi"}]
    await store.save_history(key, "t-1", "supervisor", None, history)
    await store.save_response(
        key, "t-1", {"id": "m1", "message": {"body": "done"}, "msg_type": "response"}
    )
    queue = [{"priority": 3, "seq": 7, "message": {"id": "q1", "msg_type": "request"}}]
    await store.save_queue(key, "t-1", queue)
    assert await store.flush(timeout=10)

    snap = await store.load_instance(key)
    assert snap.tasks["t-1"] == {**TASK, "breakpoint_calls": [{"call_id": "c1"}]}
    assert snap.events["t-1"] == [
        {"event": "new_message", "data": f'{{"i":{i}}}', "id": str(i)} for i in range(3)
    ]
    assert snap.histories == {("t-1", "supervisor"): history}
    assert snap.histories_for_task("t-1") == {"supervisor": history}
    assert snap.responses["t-1"]["message"]["body"] == "done"
    assert snap.queues == {"t-1": queue}

    await store.delete_queue(key, "t-1")
    assert (await store.load_instance(key)).queues == {}


async def test_partial_task_update_keeps_other_fields(store: TaskStore) -> None:
    key = new_key()
    await store.upsert_task(key, TASK)
    await store.upsert_task(key, {"task_id": "t-1", "is_running": False, "completed": True})
    await store.upsert_task(key, {"task_id": "t-1", "title": None, "note": "x"})
    record = (await store.load_instance(key)).tasks["t-1"]
    assert record == {**TASK, "is_running": False, "completed": True, "note": "x"}


async def test_history_save_replaces_instead_of_appending(store: TaskStore) -> None:
    # BEHAVIOR §13.20: the original appended a row per completion and concatenated them.
    key = new_key()
    first = [{"role": "user", "content": "one"}]
    second = first + [{"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}]
    await store.save_history(key, "t", "a", "completions", first)
    await store.flush(timeout=10)
    await store.save_history(key, "t", "a", "completions", second)
    snap = await store.load_instance(key)
    assert snap.histories[("t", "a")] == second


async def test_instances_are_isolated(store: TaskStore) -> None:
    key_a, key_b = new_key(), new_key("admin")
    await store.upsert_task(key_a, TASK)
    await store.save_history(key_a, "t-1", "sup", None, [{"role": "user", "content": "a"}])
    snap_b = await store.load_instance(key_b)
    assert snap_b.is_empty()
    assert not (await store.load_instance(key_a)).is_empty()


async def test_later_mutation_of_runtime_objects_does_not_change_the_store(
    store: TaskStore,
) -> None:
    key = new_key()
    history = [{"role": "user", "content": "original"}]
    await store.save_history(key, "t", "a", None, history)
    history[0]["content"] = "mutated"
    history.append({"role": "assistant", "content": "extra"})
    assert (await store.load_instance(key)).histories[("t", "a")] == [
        {"role": "user", "content": "original"}
    ]


async def test_bad_task_record_is_rejected_by_the_caller(store: TaskStore) -> None:
    with pytest.raises(ValueError, match="task_id"):
        await store.upsert_task(new_key(), {"task_owner": "x"})
    with pytest.raises(ValueError, match="start_time"):
        await store.upsert_task(new_key(), {"task_id": "t", "start_time": "yesterday"})
    assert store.pending_writes == 0


# -- stored events keep a message once (issue 12, item 5) ------------------------------------


async def test_stored_events_hold_a_large_message_once(store: TaskStore) -> None:
    from mail.api.persistence import StoreObserver, restore_snapshot
    from support.scripted_agents import AgentSpec, ScriptedAgent, make_runtime, run_task
    from support.scripted_agents import task_complete as complete

    def runtime() -> Any:
        agent = ScriptedAgent("supervisor", [[complete("ok")]])
        return make_runtime({"supervisor": AgentSpec(agent, [], True)})

    rt = runtime()
    key = new_key()
    observer = StoreObserver(rt, store, key, persist_histories=False)
    observer.start()
    rt.observer = observer
    body = "z" * 200_000
    response = await run_task(rt, "big", body)
    assert response["message"]["body"] == "ok"
    assert await observer.flush(10)
    await observer.close()

    snap = await store.load_instance(key)
    stored = sum(len(e["data"] or "") for e in snap.events["big"])
    assert len(body) < stored < 1.2 * len(body)  # once, not twice (description + message)

    # Restored events read exactly as the live ones did.
    again = runtime()
    restore_snapshot(again, snap)
    live = {e.id: e for e in rt.get_task_events("big")}
    for event in again.get_task_events("big"):
        assert json.loads(event.data) == json.loads(live[event.id].data)


async def test_last_save_or_delete_of_a_queue_wins(store: TaskStore) -> None:
    # Written without a flush in between: SQL stores coalesce them within one batch.
    key = new_key()
    await store.save_queue(key, "gone", [{"seq": 1}])
    await store.save_queue(key, "gone", [{"seq": 2}])
    await store.delete_queue(key, "gone")
    await store.delete_queue(key, "kept")
    await store.save_queue(key, "kept", [{"seq": 3}])
    await store.save_history(key, "kept", "a", None, [{"role": "user", "content": "1"}])
    await store.save_history(key, "kept", "a", None, [{"role": "user", "content": "2"}])
    snap = await store.load_instance(key)
    assert snap.queues == {"kept": [{"seq": 3}]}
    assert snap.histories[("kept", "a")] == [{"role": "user", "content": "2"}]


async def test_write_nowait_keeps_the_order_of_awaited_writes(store: TaskStore) -> None:
    nowait = getattr(store, "write_nowait", None)
    if nowait is None:
        pytest.skip("the store has no write_nowait (the observer awaits its methods)")
    key = new_key()
    assert nowait(key, "upsert_task", TASK)
    assert nowait(key, "append_event", "t-1", {"event": "e", "data": "1", "id": "1"})
    await store.append_event(key, "t-1", {"event": "e", "data": "2", "id": "2"})
    assert nowait(key, "append_event", "t-1", {"event": "e", "data": "3", "id": "3"})
    assert nowait(key, "save_queue", "t-1", [{"seq": 1}])
    with pytest.raises(ValueError, match="task_id"):
        nowait(key, "upsert_task", {"task_id": ""})
    snap = await store.load_instance(key)
    assert [e["data"] for e in snap.events["t-1"]] == ["1", "2", "3"]
    assert snap.queues == {"t-1": [{"seq": 1}]}
    assert "t-1" in snap.tasks


async def test_a_task_that_stored_no_queue_deletes_none(store: TaskStore) -> None:
    # The observer skips deleting a queue row the instance never had (one write less per
    # finished task), and still deletes the rows it loaded or saved.
    from mail.api.persistence import StoreObserver
    from support.scripted_agents import AgentSpec, ScriptedAgent, make_runtime

    key = new_key()
    await store.save_queue(key, "t-old", [{"seq": 1}])
    methods: list[str] = []
    nowait = getattr(store, "write_nowait", None)
    if nowait is not None:

        def counted(k: Any, method: str, *args: Any) -> bool:
            methods.append(method)
            return bool(nowait(k, method, *args))

        store.write_nowait = counted  # type: ignore[attr-defined]
    else:
        delete = store.delete_queue

        async def counted_delete(*args: Any) -> None:
            methods.append("delete_queue")
            await delete(*args)

        store.delete_queue = counted_delete  # type: ignore[method-assign]

    runtime = make_runtime({"supervisor": AgentSpec(ScriptedAgent("supervisor", []), [], True)})
    observer = StoreObserver(runtime, store, key)
    observer.stored_queues((await store.load_instance(key)).queues)
    observer.start()
    observer.queue_stashed("t-new", [])  # never stored: nothing to delete
    observer.journal_changed("t-new", None)
    assert methods.count("delete_queue") == 0
    observer.queue_stashed("t-old", [])  # loaded: deleted
    observer.queue_stashed("t-new", [{"seq": 2}])
    observer.queue_stashed("t-new", [])  # saved, then deleted
    assert await observer.flush(10)
    assert methods.count("delete_queue") == 2
    assert (await store.load_instance(key)).queues == {}

    unknown = StoreObserver(runtime, store, key)  # not told what was stored: deletes
    unknown.start()
    unknown.queue_stashed("t-other", [])
    assert await unknown.flush(10)
    assert methods.count("delete_queue") == 3
    await observer.close()
    await unknown.close()


async def test_task_writes_in_one_batch_leave_what_one_by_one_writes_leave(
    store: TaskStore,
) -> None:
    # The SQL stores merge successive writes of one task record in a batch into one row
    # write (sql_base._merge_task): whole records, partial updates and None columns in
    # between must end as they do written one at a time.
    records: list[dict[str, Any]] = [
        {**TASK, "state": "running", "a": 1},
        {"task_id": "t-1", "is_running": False},
        {**TASK, "title": None, "is_running": None, "state": "running", "a": 2},
        {**TASK, "title": "renamed", "is_running": None, "state": "done", "a": 2, "b": 3},
        {"task_id": "t-1", "note": "n"},  # fewer metadata keys: the ones before stay apart
        {"task_id": "t-2", "task_owner": "user:u2@demo", "start_time": TASK["start_time"]},
        {**TASK, "task_id": "t-2", "title": None, "remote_swarms": None, "x": [1]},
    ]
    one_by_one, batched = new_key(), new_key()
    for record in records:
        await store.upsert_task(one_by_one, record)
        await store.flush()
    nowait = getattr(store, "write_nowait", None)
    for record in records:  # one tick: one batch
        if nowait is None:
            await store.upsert_task(batched, record)
        else:
            assert nowait(batched, "upsert_task", record)
    expected = (await store.load_instance(one_by_one)).tasks
    assert (await store.load_instance(batched)).tasks == expected
    assert expected["t-1"]["title"] == "renamed" and expected["t-1"]["is_running"] is False
    assert (expected["t-1"]["state"], expected["t-1"]["b"], expected["t-1"]["note"]) == (
        "done",
        3,
        "n",
    )
    assert (expected["t-2"]["remote_swarms"], expected["t-2"]["x"]) == ([], [1])


def test_merged_task_writes_keep_the_later_value_or_the_earlier_one() -> None:
    from mail.store.sql_batch import SqlWrite, coalesce_writes

    head = ("s", "user", "u", "t-1")
    first = SqlWrite(
        "task", (*head, "o", "[]", None, 1, 0, "A", "2026", '{"k":1}'), None, 1, frozenset({"k"})
    )
    second = SqlWrite(
        "task",
        (*head, None, None, "[]", None, 1, None, None, '{"k":2,"m":3}'),
        None,
        1,
        frozenset({"k", "m"}),
    )
    other = SqlWrite("event", (*head, "e", "{}", "1"))
    # At the earlier write's place: a row the batch inserts gets the rowid it would get one
    # write at a time (SQLite lists tasks of one start time in rowid order).
    (merged, event) = coalesce_writes([first, other, second])
    assert event is other
    assert merged.args == (*head, "o", "[]", "[]", 1, 1, "A", "2026", '{"k":2,"m":3}')
    assert merged.weight == 2
    task_2 = SqlWrite("task", ("s", "user", "u", "t-2", *first.args[4:]), None, 1, first.merge_keys)
    assert [w.args[3] for w in coalesce_writes([first, task_2, second])] == ["t-1", "t-2"]
    # A later write that sets fewer metadata keys, or another lease, is not merged into.
    fewer = SqlWrite(
        "task", (*head, None, None, None, 0, None, None, None, "{}"), None, 1, frozenset()
    )
    assert len(coalesce_writes([first, fewer])) == 2
    fenced = SqlWrite("task", second.args, 7, 1, second.merge_keys)
    assert len(coalesce_writes([first, fenced])) == 2
    # Nor across a write of the record under another lease between them.
    assert len(coalesce_writes([first, fenced, second])) == 3
