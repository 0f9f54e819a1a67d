"""SQLite keys of ``POST /message`` written with their task (`idempotency_sqlite_buffered`),
and a kill -9 at the moments that matter.

- A key taken with its work is not on the file until the task store commits what was queued
  with it; then the key and the task's first writes are there together.
- A process killed (SIGKILL) after one key and its task were committed and while a second
  key and its task were only queued: the file has the first pair and nothing of the second
  (never a task without its key). Opened again, the first key is held (with its task id),
  the second is free: its retry runs as a first request (nothing had been acknowledged).
- A real `mail server` started on a file that holds a key whose task never got its message
  (what a kill between the key's commit and its task's leaves, e.g. when the buffer commits
  them in two batches): the retry runs the task once, under the key's task id, and a second
  retry gets that answer replayed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from mail.store.base import InstanceKey
from mail.store.idempotency import KeyRecord
from mail.store.idempotency_schema import _SQLITE_COLUMNS
from mail.store.idempotency_sqlite_buffered import (
    KEY_ROW_SQL,
    TAKE_ROW_SQL,
    BufferedSqliteIdempotencyStore,
    KeyFilter,
    key_row_statements,
)
from mail.store.sqlite import SqliteTaskStore
from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.llm_thread import ThreadedLLM, mentions
from support.review_swarm import review_swarms_json
from support.scripted_llm import reply, tool_call

pytestmark = pytest.mark.timeout(300)

ALICE = InstanceKey("s", "user", "alice")


def _rows(path: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, timeout=10)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _record(subject: str, fingerprint: str = "fp") -> KeyRecord:
    now = time.time()
    return KeyRecord(fingerprint, now, now + 3600, subject=subject, context={"after": 0})


async def _open(
    path: Path, **options: object
) -> tuple[SqliteTaskStore, BufferedSqliteIdempotencyStore]:
    tasks = SqliteTaskStore(path, **options)
    await tasks.start()
    keys = BufferedSqliteIdempotencyStore(path, tasks)
    await keys.start()
    return tasks, keys


async def test_a_key_taken_with_its_work_commits_with_the_task(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    tasks, keys = await _open(path, batch_delay=30.0)  # nothing commits until flushed
    try:
        assert await keys.take_with_work(ALICE, "k1", _record("task-1")) is None
        await tasks.upsert_task(ALICE, {"task_id": "task-1", "task_owner": "alice"})
        assert _rows(path, "SELECT idem_key FROM idempotency_keys") == []
        assert await tasks.flush(10)
        assert _rows(path, "SELECT idem_key, subject FROM idempotency_keys") == [("k1", "task-1")]
        assert _rows(path, "SELECT task_id FROM tasks") == [("task-1",)]
        # A repeat is held (from memory, its record from the file); another key is free.
        held = await keys.take_with_work(ALICE, "k1", _record("task-x"))
        assert held is not None and held.subject == "task-1"
        assert await keys.take_with_work(ALICE, "k2", _record("task-2")) is None
        # The outcome, queued after the answer, lands with the next commit.
        await keys.finish_many([(ALICE, "k2", 200, "application/json", b'{"response":"ok"}')])
        got = await keys.get(ALICE, "k2", time.time())
        assert got is not None and got.finished and got.body == b'{"response":"ok"}'
        # A released key is free again at once, and on the file.
        assert await keys.take_with_work(ALICE, "k3", _record("task-3")) is None
        await keys.release(ALICE, "k3")
        assert await keys.get(ALICE, "k3", time.time()) is None
        assert await keys.take_with_work(ALICE, "k3", _record("task-3b")) is None
    finally:
        await keys.close()
        await tasks.close()


async def test_key_rows_ride_with_the_next_batch_as_one_write(tmp_path: Path) -> None:
    """Takes queue no write of their own: their rows ride with the next batch the task
    store cuts (one write for them all, ahead of that batch's writes), and a flush writes
    them even with nothing queued after them (a request refused before its task started)."""
    path = tmp_path / "mail.db"
    tasks, keys = await _open(path, batch_delay=30.0)  # nothing commits until flushed
    buffer = tasks._buffer
    applied: list[list[str]] = []
    apply = tasks._write_batch_now

    def recorded(batch: list[Any]) -> bool:
        applied.append([write.kind for write in batch])
        return apply(batch)

    tasks._buffer._write_now = recorded
    try:
        assert await keys.take_with_work(ALICE, "k0", _record("task-0")) is None  # (reads)
        assert await tasks.flush(10)
        queued = buffer.submitted
        marks = [keys.take_now(ALICE, f"k{n}", _record(f"task-{n}")) for n in (1, 2, 3)]
        assert all(marks) and buffer.submitted == queued  # riders, not queued writes
        assert not any(keys.written(mark) for mark in marks)
        await tasks.upsert_task(ALICE, {"task_id": "task-3", "task_owner": "alice"})
        assert await tasks.flush(10)
        assert applied[-1] == ["idempotency_keys", "task"]  # the three rows as one write
        assert all(keys.written(mark) for mark in marks)
        got = _rows(path, "SELECT idem_key, subject FROM idempotency_keys ORDER BY idem_key")
        assert got == [(f"k{n}", f"task-{n}") for n in range(4)]
        # A take with nothing queued after it: committed when it is settled.
        mark = keys.take_now(ALICE, "k4", _record("task-4"))
        assert mark and not keys.settled(ALICE, "k4")
        await keys.settle(ALICE, "k4")
        assert keys.written(mark) and keys.settled(ALICE, "k4")
        assert _rows(path, "SELECT subject FROM idempotency_keys WHERE idem_key = 'k4'") == [
            ("task-4",)
        ]
    finally:
        await keys.close()
        await tasks.close()


async def test_a_take_and_its_outcome_in_one_batch_land_in_their_order(tmp_path: Path) -> None:
    """A take's row is written by its own statement (10 columns, no outcome) and an outcome's
    by the whole row's: queued in one batch, the key ends with its outcome, and a key taken
    after it is written without one."""
    path = tmp_path / "mail.db"
    tasks, keys = await _open(path, batch_delay=30.0)  # nothing commits until flushed
    try:
        assert await keys.take_with_work(ALICE, "k1", _record("task-1")) is None
        await keys.finish_many([(ALICE, "k1", 201, "application/json", b'{"a":1}')])
        assert await keys.take_with_work(ALICE, "k2", _record("task-2")) is None
        assert _rows(path, "SELECT idem_key FROM idempotency_keys") == []
        assert await tasks.flush(10)
        got = _rows(
            path, "SELECT idem_key, subject, status, body FROM idempotency_keys ORDER BY idem_key"
        )
        assert got == [("k1", "task-1", 201, b'{"a":1}'), ("k2", "task-2", None, None)]
    finally:
        await keys.close()
        await tasks.close()


def test_key_row_statements_keep_the_order_of_takes_and_outcomes(tmp_path: Path) -> None:
    """Runs of one statement each, in the rows' order: a key whose outcome is followed by a
    new take of it (in one batch) ends as taken, with no outcome, on a real file."""
    now = time.time()

    def take(key: str, subject: str) -> tuple[object, ...]:
        return ("s", "user", "alice", key, "fp", subject, "{}", "h", now, now + 60)

    def outcome(key: str, subject: str) -> tuple[object, ...]:
        return (*take(key, subject), 200, "application/json", b"{}")

    rows = [take("a", "t1"), outcome("a", "t1"), take("b", "t2"), take("a", "t3")]
    runs = key_row_statements(rows)
    assert [(sql is TAKE_ROW_SQL, len(batch)) for sql, batch in runs] == [
        (True, 1),
        (False, 1),
        (True, 2),
    ]
    assert [row for _, batch in runs for row in batch] == rows
    conn = sqlite3.connect(tmp_path / "keys.db")
    try:
        conn.execute(f"CREATE TABLE idempotency_keys ({_SQLITE_COLUMNS})")
        for sql, batch in runs:
            conn.executemany(sql, batch)
        got = conn.execute(
            "SELECT idem_key, subject, status, body FROM idempotency_keys ORDER BY idem_key"
        ).fetchall()
    finally:
        conn.close()
    assert got == [("a", "t3", None, None), ("b", "t2", None, None)]
    assert KEY_ROW_SQL != TAKE_ROW_SQL


async def test_a_released_key_is_forgotten_on_the_file_before_release_returns(
    tmp_path: Path,
) -> None:
    """A refused request's key is given back before its refusal leaves: when the key's row was
    committed (here by another request's flush), its release is on the file too when
    `release` returns, so a crash right after the refusal leaves no key for a retry to find."""
    path = tmp_path / "mail.db"
    tasks, keys = await _open(path, batch_delay=30.0)  # nothing commits until flushed
    try:
        assert await keys.take_with_work(ALICE, "k1", _record("task-1")) is None
        await tasks.upsert_task(ALICE, {"task_id": "task-1", "task_owner": "alice"})
        assert await tasks.flush(10)  # another request's flush commits the key's row
        live = "SELECT idem_key FROM idempotency_keys WHERE expires_at > ?"
        assert _rows(path, live, time.time()) == [("k1",)]
        await keys.release(ALICE, "k1")
        assert _rows(path, live, time.time()) == [], "the release was only queued"
    finally:
        await keys.close()
        await tasks.close()


async def test_take_now_takes_only_a_key_it_can_tell_is_new(tmp_path: Path) -> None:
    """The synchronous take of the usual keyed request: a new key of a caller whose keys are
    known goes into the buffer with nothing awaited; an unknown caller, a key the file may
    have (a repeat), or an outage leaves it to `take_with_work`, which reads the file."""
    path = tmp_path / "mail.db"
    tasks, keys = await _open(path, batch_delay=30.0)
    try:
        assert not keys.take_now(ALICE, "k0", _record("task-0"))  # the caller's keys unread
        assert await keys.take_with_work(ALICE, "k0", _record("task-0")) is None
        assert keys.settled(ALICE, "never-taken")  # nothing of it queued: nothing to wait for
        assert keys.take_now(ALICE, "k1", _record("task-1"))  # new: queued, not awaited
        assert keys.carried(ALICE, "k1")
        # Queued, not committed (the batch waits 30 s): an answer naming its task must wait.
        assert not keys.settled(ALICE, "k1") and not keys.settled(ALICE, "k0")
        assert _rows(path, "SELECT idem_key FROM idempotency_keys") == []
        await tasks.upsert_task(ALICE, {"task_id": "task-1", "task_owner": "alice"})
        await keys.settle(ALICE, "k1")
        assert keys.settled(ALICE, "k1")
        assert _rows(path, "SELECT idem_key, subject FROM idempotency_keys ORDER BY idem_key") == [
            ("k0", "task-0"),
            ("k1", "task-1"),
        ]
        # A repeat is never taken here: the file holds it, and `take_with_work` says so.
        assert not keys.take_now(ALICE, "k1", _record("task-x"))
        held = await keys.take_with_work(ALICE, "k1", _record("task-x"))
        assert held is not None and held.subject == "task-1"
    finally:
        await keys.close()
        await tasks.close()


def test_the_key_filter_never_misses_a_key_and_rarely_invents_one() -> None:
    from mail.store.idempotency_sqlite_buffered import KeyFilter

    loaded = [str(uuid.uuid4()) for _ in range(3000)]
    known = KeyFilter(loaded)
    assert len(known.slots) == 8192  # at most half full
    added = [str(uuid.uuid4()) for _ in range(30_000)]
    said_present = sum(known.add(key) for key in added)  # it grows as it goes
    assert said_present <= 3  # a fingerprint shared by chance: ~0.1 expected
    assert 2 * known.count <= len(known.slots) <= 4 * known.count  # 8 to 16 bytes a key
    assert all(key in known for key in loaded + added)  # never a false "absent"
    strangers = [str(uuid.uuid4()) for _ in range(200_000)]
    assert sum(key in known for key in strangers) <= 12  # ~1.5 expected (33,000 of 2**32)
    assert len(KeyFilter([]).slots) == KeyFilter.MIN_SLOTS


async def test_the_key_filter_grows_without_reading_the_file(tmp_path: Path) -> None:
    """Past half full the caller's table doubles from the fingerprints it holds: the same
    table, no read of the file; past its limit, it is read again from the file (what it
    costs in memory follows the caller's keys on the file); a repeat is found either way."""
    from mail.store.idempotency_sqlite_buffered import KeyFilter

    path = tmp_path / "mail.db"
    tasks, keys = await _open(path)
    try:
        alice = ("s", "user", "alice")
        assert await keys.take_with_work(ALICE, "k0", _record("t0")) is None
        first = keys._known[alice]
        reads = 0
        run = keys.db.run

        async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return await run(fn, *args, **kwargs)

        keys.db.run = counted  # type: ignore[method-assign]
        taken = 1
        while len(first.slots) < 4 * KeyFilter.MIN_SLOTS:  # grown twice
            assert keys.take_now(ALICE, f"k{taken}", _record(f"t{taken}"))
            taken += 1
        assert keys._known[alice] is first and reads == 0
        assert first.count == taken == KeyFilter.MIN_SLOTS  # (half of twice as many slots)
        # Past its limit (evicted and expired keys stay in it) it is read again from the file.
        while alice in keys._known:
            assert keys.take_now(ALICE, f"k{taken}", _record(f"t{taken}"))
            taken += 1
        assert taken == KeyFilter.MIN_LIMIT + 1 and reads == 0
        await tasks.flush(10)
        held = await keys.take_with_work(ALICE, "k7", _record("again"))
        assert held is not None and held.subject == "t7"
        assert reads >= 1 and keys._known[alice] is not first
        assert keys._known[alice].limit == 2 * taken and "k8000" in keys._known[alice]
    finally:
        await keys.close()
        await tasks.close()


_CHILD = """
import asyncio, os, signal, sys, time
sys.path[:0] = {paths!r}
from test_idempotency_sqlite_buffered import ALICE, _open, _record

async def main():
    tasks, keys = await _open({path!r}, batch_delay=30.0)
    assert await keys.take_with_work(ALICE, "committed", _record("task-c")) is None
    await tasks.upsert_task(ALICE, {{"task_id": "task-c", "task_owner": "alice"}})
    assert await tasks.flush(10)
    assert await keys.take_with_work(ALICE, "queued", _record("task-q")) is None
    await tasks.upsert_task(ALICE, {{"task_id": "task-q", "task_owner": "alice"}})
    await tasks.append_event(ALICE, "task-q", {{"event": "new_message", "data": "x", "id": "e1"}})
    print("queued", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


async def test_kill_9_keeps_each_key_with_its_task(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    here = Path(__file__).parent
    code = _CHILD.format(paths=[str(here), str(here.parent)], path=str(path))
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert "queued" in child.stdout
    keys_on_file = dict(_rows(path, "SELECT idem_key, subject FROM idempotency_keys"))
    tasks_on_file = {row[0] for row in _rows(path, "SELECT task_id FROM tasks")}
    assert keys_on_file == {"committed": "task-c"}
    assert tasks_on_file == {"task-c"}  # the queued task went with its key: neither is there
    assert _rows(path, "SELECT count(*) FROM task_events WHERE task_id = 'task-q'") == [(0,)]

    tasks, keys = await _open(path)  # the restarted server
    try:
        held = await keys.take_with_work(ALICE, "committed", _record("again"))
        assert held is not None and held.subject == "task-c"
        assert await keys.take_with_work(ALICE, "queued", _record("task-q2")) is None
    finally:
        await keys.close()
        await tasks.close()
    assert os.path.exists(path)


def test_a_key_whose_task_never_got_its_message_runs_it_once(tmp_path: Path) -> None:
    from mail.server.idempotency_wire import fingerprint
    from mail.store.sqlite_schema import connect, migrate

    swarm = f"idem-lone-{uuid.uuid4().hex[:8]}"
    token = uuid.uuid4().hex
    payload = {"body": f"question {token}"}
    key, task_id = str(uuid.uuid4()), str(uuid.uuid4())
    database = tmp_path / "data" / "mail.db"
    database.parent.mkdir(parents=True)
    conn = connect(database)
    migrate(conn)
    now = time.time()
    conn.execute(
        "INSERT INTO idempotency_keys (swarm_name, caller_role, caller_id, idem_key,"
        " fingerprint, subject, context, holder, created_at, expires_at)"
        " VALUES (?, 'user', 'alice', ?, ?, ?, ?, 'gone:1', ?, ?)",
        (
            swarm,
            key,
            fingerprint("POST", "/message", json.dumps(payload).encode()),
            task_id,
            json.dumps({"after": 0, "answer": None, "stream": False}),
            now - 5,
            now + 3600,
        ),
    )
    conn.close()
    with ThreadedLLM() as llm:
        llm.queue(
            reply(tool_call("task_complete", {"finish_message": f"answer {token}"})),
            match=lambda r: mentions(r, token),
        )
        (tmp_path / "swarms.json").write_text(
            json.dumps([review_swarms_json(swarm, llm.base_url)]), encoding="utf-8"
        )
        api_key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
        port = free_port()
        config = write_config(tmp_path, port=port, swarm=swarm)
        server = ServerProcess(tmp_path, port, args=["--config", str(config)])
        server.start()
        try:
            keyed = {**auth(api_key), "Idempotency-Key": f'"{key}"'}
            url = f"{server.base_url}/message"
            first = httpx.post(url, json=payload, headers=keyed, timeout=60)
            assert first.status_code == 200, first.text
            assert first.json()["response"] == f"answer {token}"
            assert first.json()["task_id"] == task_id  # the key's task: one task, not two
            again = httpx.post(url, json=payload, headers=keyed, timeout=60)
            assert again.status_code == 200, again.text
            assert again.headers["idempotent-replayed"] == "true"
            assert again.json()["response"] == f"answer {token}"
            tasks = httpx.get(f"{server.base_url}/tasks", headers=auth(api_key), timeout=30)
            assert list(tasks.json()) == [task_id]
        finally:
            assert server.stop(timeout=60) == 0, server.logs()
        assert len(llm.requests(token)) == 1


@pytest.mark.parametrize("release_some", [False, True])
@pytest.mark.parametrize("warm", [False, True])
async def test_synchronous_takes_never_pass_the_bound(
    tmp_path: Path, warm: bool, release_some: bool
) -> None:
    """Thirty new keys of one caller at once through the guard over the SQLite file (each
    `POST /message`'s take: taken at once once the caller's count and filter
    are known, the awaited take and a recount before): at most `max_keys` are live, whether
    the caller's count is known already (`warm`) or read by the first of them, and with
    some of the takes given back meanwhile (`release_some`: a request its checks refused)."""
    from fastapi import HTTPException

    from mail.server.auth import Caller
    from mail.server.idempotency_guard import IdempotencyGuard

    tasks, keys = await _open(tmp_path / "mail.db")
    guard = IdempotencyGuard(keys, swarm_name="s", ttl=100.0, max_keys=5, max_length=255)
    caller = Caller("user", "alice", "k")
    synchronous = 0
    take_now = keys.take_fields_now

    def counted(*args: Any) -> int:
        nonlocal synchronous
        done = take_now(*args)
        synchronous += bool(done)
        return done

    keys.take_fields_now = counted  # type: ignore[method-assign]
    try:
        if warm:
            first = guard.open(caller, "warm", "fp-warm")
            first.with_work = True
            await first.take("task-warm")

        async def take(n: int) -> str:
            ticket = guard.open(caller, f"k{n}", f"fp{n}")
            ticket.with_work = True
            await ticket.take(f"task-{n}")
            if release_some and n % 3 == 0:
                await ticket.release()
                ticket.leave()
                return "released"
            return "taken"

        results = await asyncio.gather(*(take(n) for n in range(30)), return_exceptions=True)
        refused = [r for r in results if isinstance(r, HTTPException) and r.status_code == 429]
        assert len(refused) + results.count("taken") + results.count("released") == 30, results
        live = await keys.count(guard.scope(caller), time.time())
        assert live == 5, results
        assert results.count("taken") == 5 - warm, results
        # (with the count and the filter known, the takes were the synchronous ones)
        assert synchronous == (results.count("taken") + results.count("released") if warm else 0)
    finally:
        await guard.close()
        await tasks.close()


async def test_a_sweep_amid_a_recount_keeps_the_bound(tmp_path: Path) -> None:
    """The ten-minute sweep forgets the per-caller bookkeeping of callers with nothing under
    way; takes queued for the caller's recount lock are under way (the lock just released
    is not yet taken again, `locked()` says False meanwhile): the sweep that the first of
    them runs keeps it, so later takes count on the same books and the bound holds."""
    from fastapi import HTTPException

    from mail.server.auth import Caller
    from mail.server.idempotency_guard import IdempotencyGuard

    tasks, keys = await _open(tmp_path / "mail.db")
    guard = IdempotencyGuard(keys, swarm_name="s", ttl=100.0, max_keys=5, max_length=255)
    caller = Caller("user", "alice", "k")
    try:
        await keys._keys_of(guard.scope(caller))  # the caller's filter read, its count not
        books = guard.caller_keys("user", "alice")
        guard._next_sweep = 0  # due: the first take that ends runs it

        async def take(n: int) -> str:
            ticket = guard.open(caller, f"k{n}", f"fp{n}", with_work=True)
            try:
                await ticket.take(f"task-{n}")
            except HTTPException as exc:
                assert exc.status_code == 429
                return "refused"
            return "taken"

        first = [asyncio.ensure_future(take(n)) for n in range(8)]
        while guard._next_sweep == 0:  # (the sweep ran)
            await asyncio.sleep(0)
        second = [asyncio.ensure_future(take(n)) for n in range(100, 108)]
        results = await asyncio.gather(*first, *second)
        assert results.count("taken") == 5, results
        assert guard.caller_keys("user", "alice") is books
        assert await tasks.flush(10)
        assert await keys.count(guard.scope(caller), time.time()) == 5
    finally:
        await guard.close()
        await tasks.close()


class _Hashed(str):
    """A key whose `hash` is chosen (negative, or differing from another only in high bits)."""

    digest = 0

    def __hash__(self) -> int:
        return self.digest


def _hashed(text: str, digest: int) -> str:
    key = _Hashed(text)
    key.digest = digest
    return key


def test_the_key_filter_never_says_absent_for_a_key_it_has() -> None:
    """An "absent" for a taken key would run its retry twice: chosen hashes (negative, the
    extremes, ones that differ only above the fingerprint's bits), odd keys, and a table
    read with keys then filled until it doubled twice."""
    digests = [0, 1, -1, -2, 4095, 4096, -4096, 2**63 - 1, -(2**63), 2**62, -(2**62)]
    digests += [1 << bit for bit in range(64)] + [-(1 << bit) for bit in range(64)]
    digests += [5 | high << 52 for high in range(16)]  # the same low bits, other high ones
    chosen = [_hashed(f"k{n}", digest) for n, digest in enumerate(digests)]
    odd = ["", "x" * 100_000, "\x00", "é", '"quoted"', str(uuid.uuid4()).upper()]
    read = [str(uuid.uuid4()) for _ in range(700)]
    keys = KeyFilter(read)
    assert len(keys.slots) == 2048  # (at most half full)
    for key in [*chosen, *odd]:
        keys.add(key)
    added = []
    while len(keys.slots) < 4 * KeyFilter.MIN_SLOTS:  # (grown twice, from what it held)
        added.append(str(uuid.uuid4()))
        keys.add(added[-1])
    missing = [key for key in [*read, *chosen, *odd, *added] if key not in keys]
    assert not missing, missing[:5]
    fresh = [str(uuid.uuid4()) for _ in range(20_000)]
    assert sum(key in keys for key in fresh) <= 12  # (~0.3 expected)
