"""Attacks on POST /message's SQLite keys written with their task (`idempotency_sqlite_buffered`),
over real HTTP against real `mail server` processes on the stub swarm (no model: one task per
agent turn, its id tells whether a retry ran the work again).

- A full disk (a real tmpfs, filled to ENOSPC) while keyed requests run: a keyed request the
  server answered 200 must have its key stored; after a kill -9, space freed and a restart,
  its retry gets the same task replayed, never a second task.
- A kill -9 while many keyed requests are in flight, right after the first answers left:
  every key that was answered is held after the restart (the same task, replayed), and no
  task is on the file without the key that started it.
- The same for a stream's first event and a duplicate's 409 (both name the task), under a
  full disk and after a kill -9; a keyed answer that leaves while another process holds the
  file's write lock (the server's commit waits, the answer does not).
- The per-caller bound under a burst of concurrent new keys whose work is still running.
- One key from 50 concurrent requests, 422, two callers, key limits, reuse after the TTL;
  a message with its own webhook replayed after a kill -9; a clean stop keeps outcomes.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
    write_stub_swarms,
)
from support.full_disk import Filler, small_disk

pytestmark = pytest.mark.timeout(600)


class Server:
    """A stub-swarm `mail server` whose database lives at `database` (restartable)."""

    def __init__(self, directory: Path, database: Path, extra: str = "") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        write_stub_swarms(directory)
        keys = directory / "registries" / "keys.json"
        self.user = create_key(keys, "user", "alice")
        self.other = create_key(keys, "user", "bob")
        self.port = free_port()
        store = f'\n[server.store]\npath = "{database}"\n'
        self.config = write_config(directory, port=self.port, extra=extra + store)
        self.database = database
        self.proc: ServerProcess | None = None

    def start(self) -> ServerProcess:
        self.proc = ServerProcess(self.directory, self.port, args=["--config", str(self.config)])
        self.proc.start()
        return self.proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(
        self, body: str, key: str | None, timeout: float = 120, *, who: str | None = None
    ) -> httpx.Response:
        headers = auth(who or self.user)
        if key is not None:
            headers["Idempotency-Key"] = key if key.startswith('"') else f'"{key}"'
        return httpx.post(
            f"{self.url}/message", json={"body": body}, headers=headers, timeout=timeout
        )

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.url}/health", timeout=30).json()
        return body

    def kill9(self) -> None:
        assert self.proc is not None and self.proc.proc is not None
        self.proc.proc.kill()
        self.proc.proc.wait(30)


def _wait(condition: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _rows(database: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _until_answered(server: Server, body: str, key: str) -> httpx.Response:
    """POST until the answer is not 409 (a task the restarted server continues)."""
    deadline = time.monotonic() + 120
    while True:
        answer = server.post(body, key, 120)
        if answer.status_code != 409 or time.monotonic() > deadline:
            assert answer.status_code == 200, answer.text
            return answer
        time.sleep(0.2)


def _until_a_task_runs(server: Server) -> None:
    """The first request (sent from another thread) has reached its task."""
    _wait(
        lambda: httpx.get(f"{server.url}/tasks", headers=auth(server.user), timeout=30).json(),
        "the first request's task",
    )


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk", "4m") as mounted:
        yield mounted


def test_a_key_answered_while_the_disk_is_full_is_stored_or_refused(
    tmp_path: Path, disk: Path
) -> None:
    server = Server(tmp_path / "srv", disk / "mail.db")
    filler = Filler(disk)
    server.start()
    answered: dict[str, str] = {}  # key -> task id the server answered 200 with
    try:
        warm = server.post("warm-up", str(uuid.uuid4()))  # the caller's key filter is read
        assert warm.status_code == 200, warm.text
        assert filler.fill() > 0
        # Unkeyed traffic until the store says it cannot write (the WAL's spare pages used).
        for n in range(200):
            assert server.post(f"filler {n}", None).status_code == 200
            if server.health()["status"] == "degraded":
                break
        assert server.health()["status"] == "degraded", server.health()
        for n in range(10):
            key = str(uuid.uuid4())
            answer = server.post(f"keyed while full {n}", key)
            if answer.status_code == 200:
                answered[key] = answer.json()["task_id"]
            else:  # refusing is fine: nothing was claimed (503 naming the outage)
                assert answer.status_code == 503, answer.text
                assert "cannot write" in answer.json()["detail"], answer.text
        server.kill9()  # before the queued writes could land
    finally:
        filler.free()
    server.start()
    try:
        for n, (key, task_id) in enumerate(answered.items()):
            retry = server.post(f"keyed while full {n}", key)
            assert retry.status_code in (200, 409), retry.text
            # The answered key is held: the same task, not a second run.
            assert retry.json().get("task_id") == task_id, (
                f"key answered 200 with task {task_id} during the outage was not stored: its "
                f"retry after a kill -9 got {retry.status_code} {retry.text[:300]}"
            )
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def test_kill_9_with_many_keyed_requests_in_flight(tmp_path: Path) -> None:
    server = Server(tmp_path / "srv", tmp_path / "data" / "mail.db")
    server.start()
    count = 20
    keys = [str(uuid.uuid4()) for _ in range(count)]
    bodies = {key: f"SLEEP {0.1 * n:.2f} job {n}" for n, key in enumerate(keys)}
    answered: dict[str, str] = {}
    try:
        with ThreadPoolExecutor(count) as pool:
            futures = {pool.submit(server.post, bodies[key], key, 60): key for key in keys}
            for future in as_completed(futures):
                try:
                    answer = future.result()
                except httpx.HTTPError:
                    continue  # cut by the kill
                if answer.status_code == 200:
                    answered[futures[future]] = answer.json()["task_id"]
                    if len(answered) == 5:
                        server.kill9()  # right after the fifth answer left
    finally:
        if server.proc is not None and server.proc.proc is not None:
            server.proc.proc.kill()
            server.proc.proc.wait(30)
    assert len(answered) >= 5
    on_file = {row[0] for row in _rows(server.database, "SELECT subject FROM idempotency_keys")}
    tasks = {row[0] for row in _rows(server.database, "SELECT task_id FROM tasks")}
    assert tasks <= on_file, f"tasks on the file without their key: {tasks - on_file}"
    assert set(answered.values()) <= on_file, "an answered key is not on the file"
    server.start()
    try:
        finals: dict[str, str] = {}
        for key in keys:
            retry = _until_answered(server, bodies[key], key)
            finals[key] = retry.json()["task_id"]
            if key in answered:
                assert finals[key] == answered[key]
                assert retry.headers.get("idempotent-replayed") == "true"
        listed = httpx.get(f"{server.url}/tasks", headers=auth(server.user), timeout=30).json()
        ids = set(listed) if not isinstance(listed, dict) else set(listed)
        # One task per key (plus none without one): nothing ran twice.
        assert set(finals.values()) == ids - {""}, (len(ids), len(set(finals.values())))
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def _burst(server: Server, count: int, tag: str) -> list[int]:
    with ThreadPoolExecutor(count) as pool:
        answers = list(
            pool.map(lambda n: server.post(f"SLEEP 2 {tag} {n}", str(uuid.uuid4())), range(count))
        )
    return sorted(a.status_code for a in answers)


def test_the_per_caller_bound_holds_under_a_burst_of_new_keys(tmp_path: Path) -> None:
    bound = 5
    server = Server(
        tmp_path / "srv",
        tmp_path / "data" / "mail.db",
        extra=f"max_idempotency_keys_per_caller = {bound}\n",
    )
    server.start()
    try:
        warm = server.post("warm-up", str(uuid.uuid4()))
        assert warm.status_code == 200
        statuses = _burst(server, 20, "burst")
        # The warm-up's key is finished (evictable): at most `bound` keys at once under way.
        assert statuses.count(200) <= bound, statuses
        assert set(statuses) <= {200, 429}, statuses
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def test_the_per_caller_bound_holds_for_the_first_burst_after_a_start(tmp_path: Path) -> None:
    """The server counts a caller's keys on the file once (its first keyed request after a
    start or a sweep); requests that arrive together then must not all see that count."""
    bound = 5
    server = Server(
        tmp_path / "srv",
        tmp_path / "data" / "mail.db",
        extra=f"max_idempotency_keys_per_caller = {bound}\n",
    )
    server.start()
    try:
        statuses = _burst(server, 20, "first burst")
        assert set(statuses) <= {200, 429}, statuses
        assert statuses.count(200) <= bound, statuses
        live = _rows(server.database, "SELECT count(*) FROM idempotency_keys")[0][0]
        assert live <= bound, f"{live} keys on the file for a bound of {bound}"
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def _first_events(server: Server, body: str, key: str, wanted: int) -> list[Any]:
    """Open a keyed stream, read `wanted` events (pings aside), drop the connection."""
    headers = {**auth(server.user), "Idempotency-Key": f'"{key}"'}
    events = []
    with httpx.stream(
        "POST",
        f"{server.url}/message",
        json={"body": body, "stream": True},
        headers=headers,
        timeout=60,
    ) as response:
        if response.status_code == 503:  # refused (nothing claimed): no events
            return []
        assert response.status_code == 200, response.read()
        for event in parse_sse_stream(response):
            if event.event == "ping":
                continue
            events.append(event)
            if len(events) >= wanted:
                break
    return events


def _task_of(event: Any) -> str | None:
    try:
        data = event.json()
    except ValueError:
        return None
    if isinstance(data, dict):
        found = data.get("task_id") or (data.get("extra_data") or {}).get("task_id")
        return str(found) if found else None
    return None


def test_kill_9_right_after_the_first_stream_event_then_retry(tmp_path: Path) -> None:
    server = Server(tmp_path / "srv", tmp_path / "data" / "mail.db")
    server.start()
    keys = [str(uuid.uuid4()) for _ in range(8)]
    bodies = {key: f"SLEEP 2 streamed {n}" for n, key in enumerate(keys)}
    firsts: dict[str, Any] = {}
    try:
        with ThreadPoolExecutor(len(keys)) as pool:
            got = pool.map(lambda key: (key, _first_events(server, bodies[key], key, 1)), keys)
            firsts = {key: events[0] for key, events in got}
        server.kill9()  # every stream had its first event: each key and task are stored
    finally:
        if server.proc is not None and server.proc.proc is not None:
            server.proc.proc.kill()
            server.proc.proc.wait(30)
    started = {key: _task_of(event) for key, event in firsts.items()}
    assert all(started.values()), {k: (e.event, e.data[:200]) for k, e in firsts.items()}
    on_file = dict(_rows(server.database, "SELECT idem_key, subject FROM idempotency_keys"))
    assert {k: on_file.get(k) for k in keys} == started
    server.start()
    try:
        for key in keys:
            headers = {**auth(server.user), "Idempotency-Key": f'"{key}"'}
            seen: set[str] = set()
            last = None
            with httpx.stream(
                "POST",
                f"{server.url}/message",
                json={"body": bodies[key], "stream": True},
                headers=headers,
                timeout=120,
            ) as response:
                assert response.status_code == 200, response.read()
                assert response.headers.get("idempotent-replayed") == "true"
                for event in parse_sse_stream(response):
                    if event.event == "ping":
                        continue
                    task = _task_of(event)
                    if task:
                        seen.add(task)
                    last = event
                    if event.event in ("task_complete", "task_error") and event.id is None:
                        break
            assert seen == {started[key]}, (seen, started[key])
            assert last is not None and last.event == "task_complete", last
        listed = httpx.get(f"{server.url}/tasks", headers=auth(server.user), timeout=30).json()
        assert set(listed) == set(started.values())  # one task per key across the kill
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def test_kill_9_right_after_a_duplicate_was_told_of_the_task(tmp_path: Path) -> None:
    server = Server(tmp_path / "srv", tmp_path / "data" / "mail.db")
    server.start()
    key = str(uuid.uuid4())
    body = "SLEEP 5 slow one"  # (long: duplicates are sent until one is told of the task)
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(server.post, body, key, 60)
            _until_a_task_runs(server)
            deadline = time.monotonic() + 60
            while True:  # a duplicate while the first runs: 409 naming its task
                duplicate = server.post(body, key)
                if duplicate.status_code == 409 and duplicate.json().get("task_id"):
                    break
                assert time.monotonic() < deadline, duplicate.text
            server.kill9()
            try:
                first.result()
            except httpx.HTTPError:
                pass
    finally:
        if server.proc is not None and server.proc.proc is not None:
            server.proc.proc.kill()
            server.proc.proc.wait(30)
    named = duplicate.json()["task_id"]
    server.start()
    try:
        retry = _until_answered(server, body, key)
        assert retry.json()["task_id"] == named
        listed = httpx.get(f"{server.url}/tasks", headers=auth(server.user), timeout=30).json()
        assert set(listed) == {named}
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def test_a_stream_or_a_duplicate_told_of_a_task_while_the_disk_is_full(
    tmp_path: Path, disk: Path
) -> None:
    """The stream's first event and a duplicate's 409 name the task (and so claim the key):
    after a kill -9 the key must be there."""
    server = Server(tmp_path / "srv", disk / "mail.db")
    filler = Filler(disk)
    server.start()
    told: dict[str, tuple[str, str, bool]] = {}  # key -> (task id, body, streamed)
    try:
        assert server.post("warm-up", str(uuid.uuid4())).status_code == 200
        assert filler.fill() > 0
        for n in range(200):
            assert server.post(f"filler {n}", None).status_code == 200
            if server.health()["status"] == "degraded":
                break
        assert server.health()["status"] == "degraded", server.health()
        key = str(uuid.uuid4())
        body = "SLEEP 30 streamed while full"
        events = _first_events(server, body, key, 1)
        if events:  # (a 503 refuses the stream: nothing claimed)
            task = _task_of(events[0])
            assert task, events[0]
            told[key] = (task, body, True)
        key = str(uuid.uuid4())
        body = "SLEEP 30 duplicated while full"
        # The first on a raw connection, its bytes on the wire before any duplicate (reading
        # /tasks to see it run would wait for the store, which cannot write).
        first = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        raw = json.dumps({"body": body}).encode()
        first.sendall(
            (
                f"POST /message HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                f'Authorization: Bearer {server.user}\r\nIdempotency-Key: "{key}"\r\n'
                f"Content-Length: {len(raw)}\r\n\r\n"
            ).encode()
            + raw
        )
        with contextlib.closing(first):
            deadline = time.monotonic() + 60
            while True:
                duplicate = server.post(body, key)
                if duplicate.status_code == 409 and duplicate.json().get("task_id"):
                    told[key] = (duplicate.json()["task_id"], body, False)
                    break
                assert duplicate.status_code in (409, 503), duplicate.text
                if duplicate.status_code == 503 or time.monotonic() > deadline:
                    break  # refused: nothing claimed
            server.kill9()
    finally:
        filler.free()
        if server.proc is not None and server.proc.proc is not None:
            server.proc.proc.kill()
            server.proc.proc.wait(30)
    on_file = dict(_rows(server.database, "SELECT idem_key, subject FROM idempotency_keys"))
    lost = {k: v for k, v in told.items() if on_file.get(k) != v[0]}
    assert not lost, f"keys whose task a caller was told of, not on the file after kill -9: {lost}"


def test_a_key_answered_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    """Another process writing the file (a `sqlite3` shell, a backup tool with BEGIN
    IMMEDIATE) makes the server's commits wait (busy timeout 30 s): no outage, only a slow
    store. A keyed answer that leaves meanwhile claims its key: after a kill -9 (the lock
    still held) the key must be on the file, and its retry must not run the task again."""
    server = Server(tmp_path / "srv", tmp_path / "data" / "mail.db")
    server.start()
    key = str(uuid.uuid4())
    body = "locked out"
    answered: str | None = None
    try:
        assert server.post("warm-up", str(uuid.uuid4())).status_code == 200
        lock = sqlite3.connect(server.database, isolation_level=None, timeout=30)
        lock.execute("BEGIN IMMEDIATE")  # the write lock, held for up to 8 s
        try:
            with ThreadPoolExecutor(1) as pool:
                pending = pool.submit(server.post, body, key, 60)
                try:
                    answer = pending.result(timeout=8)
                except TimeoutError:
                    answer = None  # still waiting for the lock: nothing claimed
                if answer is not None and answer.status_code == 200:
                    answered = answer.json()["task_id"]
                server.kill9()  # the lock still held: the server's batch never committed
        finally:
            lock.execute("ROLLBACK")
            lock.close()
    finally:
        if server.proc is not None and server.proc.proc is not None:
            server.proc.proc.kill()
            server.proc.proc.wait(30)
    if answered is None:
        return  # the answer waited for the commit: the promise held
    on_file = dict(_rows(server.database, "SELECT idem_key, subject FROM idempotency_keys"))
    server.start()
    try:
        retry = _until_answered(server, body, key)
        assert retry.json()["task_id"] == answered and on_file.get(key) == answered, (
            f"answered 200 with task {answered} while the write lock was held; after a kill -9 "
            f"the key is {'on' if key in on_file else 'not on'} the file and the retry got "
            f"task {retry.json()['task_id']} (replayed: {retry.headers.get('idempotent-replayed')})"
        )
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def test_one_key_many_ways(tmp_path: Path) -> None:
    """50 concurrent requests with one key run one task; another body is 422; another caller
    has its own key; limits on the key; a key reused after its TTL starts a new task, which
    a kill -9 right after its answer does not lose."""
    server = Server(
        tmp_path / "srv",
        tmp_path / "data" / "mail.db",
        extra="idempotency_key_ttl = 8\nmax_idempotency_key_length = 40\n",
    )
    server.start()
    key = str(uuid.uuid4())
    try:
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda _: server.post("SLEEP 1 fifty", key), range(50)))
        taken_by = time.monotonic()  # the key was taken before any of its answers came
        ok = [a for a in answers if a.status_code == 200]
        busy = [a for a in answers if a.status_code == 409]
        assert len(ok) + len(busy) == 50, [a.status_code for a in answers]
        final = _until_answered(server, "SLEEP 1 fifty", key)
        first_task = final.json()["task_id"]
        assert {a.json()["task_id"] for a in ok} <= {first_task}
        assert {a.json().get("task_id") for a in busy} <= {first_task, None}
        assert server.post("SLEEP 1 another body", key).status_code == 422
        theirs = server.post("SLEEP 1 fifty", key, who=server.other)
        assert theirs.status_code == 200 and theirs.json()["task_id"] != first_task
        assert server.post("x", "k" * 41).status_code == 400
        assert server.post("x", '"bad\\x01"').status_code == 400
        listed = httpx.get(f"{server.url}/tasks", headers=auth(server.user), timeout=30).json()
        assert set(listed) == {first_task}
        # The key's TTL (8 s; long enough for the burst on a busy machine) since it was taken.
        time.sleep(max(0.0, taken_by + 8.5 - time.monotonic()))
        reused = server.post("after expiry, another body", key)
        assert reused.status_code == 200, reused.text
        assert "idempotent-replayed" not in reused.headers
        new_task = reused.json()["task_id"]
        assert new_task != first_task
        server.kill9()  # right after the reused key's answer
    finally:
        if server.proc is not None and server.proc.proc is not None:
            server.proc.proc.kill()
            server.proc.proc.wait(30)
    # (The TTL is too short to retry after a restart: the file says what a retry would get.)
    row = _rows(
        server.database,
        f"SELECT subject, fingerprint, expires_at - created_at FROM idempotency_keys "
        f"WHERE caller_id = 'alice' AND idem_key = '{key}'",
    )
    assert [(r[0], round(r[2])) for r in row] == [(new_task, 8)], row
    server.start()
    try:
        listed = httpx.get(f"{server.url}/tasks", headers=auth(server.user), timeout=30).json()
        assert set(listed) == {first_task, new_task}
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def test_kill_9_after_a_keyed_message_with_its_own_webhook(tmp_path: Path) -> None:
    """A message with a `webhook` takes its key on its own (committed first): a kill -9 right
    after its answer, and the retry gets the same task and the same subscription."""
    server = Server(
        tmp_path / "srv",
        tmp_path / "data" / "mail.db",
        extra='\n[server.webhooks]\nallowed_hosts = ["127.0.0.1"]\n',
    )
    server.start()
    key = str(uuid.uuid4())
    payload = {"body": "with a hook", "webhook": {"url": "http://127.0.0.1:9/hook"}}
    headers = {**auth(server.user), "Idempotency-Key": f'"{key}"'}
    try:
        first = httpx.post(f"{server.url}/message", json=payload, headers=headers, timeout=60)
        assert first.status_code == 200, first.text
        server.kill9()
    finally:
        if server.proc is not None and server.proc.proc is not None:
            server.proc.proc.kill()
            server.proc.proc.wait(30)
    server.start()
    try:
        again = httpx.post(f"{server.url}/message", json=payload, headers=headers, timeout=60)
        assert again.status_code == 200, again.text
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.json()["task_id"] == first.json()["task_id"]
        assert again.json()["webhook"]["id"] == first.json()["webhook"]["id"]
        hooks = httpx.get(f"{server.url}/webhooks", headers=auth(server.user), timeout=30)
        assert [w["id"] for w in hooks.json()["webhooks"]] == [first.json()["webhook"]["id"]]
    finally:
        assert server.proc is not None
        server.proc.stop(timeout=60)


def test_a_clean_stop_right_after_keyed_answers_keeps_their_outcomes(tmp_path: Path) -> None:
    """SIGINT right after 20 keyed answers: each key is on the file with its completed task
    (a plain answer's outcome), and after a restart each repeat gets the same bytes."""
    server = Server(tmp_path / "srv", tmp_path / "data" / "mail.db")
    server.start()
    keys = [str(uuid.uuid4()) for _ in range(20)]
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda key: server.post(f"stop {key}", key), keys))
    assert all(a.status_code == 200 for a in answers)
    assert server.proc is not None
    assert server.proc.stop(timeout=60) == 0, server.proc.logs()[-3000:]
    join = " LEFT JOIN tasks AS t ON t.task_id = k.subject AND t.caller_id = k.caller_id"
    rows = _rows(
        server.database, f"SELECT idem_key, status, is_running FROM idempotency_keys AS k{join}"
    )
    assert {k: (s, r) for k, s, r in rows if k in keys} == dict.fromkeys(keys, (None, 0))
    server.start()
    try:
        again = [server.post(f"stop {key}", key) for key in keys]
    finally:
        server.proc.stop(timeout=60)
    for first, repeat in zip(answers, again, strict=True):
        assert repeat.headers.get("idempotent-replayed") == "true", repeat.text
        assert (repeat.status_code, repeat.content) == (first.status_code, first.content)
