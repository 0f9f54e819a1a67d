"""A plain answer of ``POST /message`` on SQLite stores no outcome row: its key and its task
are the outcome (``Ticket.answered_by_task``), and a repeat rebuilds the answer from the task.

- A real `mail server` (LiteLLM agents answered by the scripted model): a repeat of a keyed
  message after its answer gets the first answer's status and body, byte for byte, and the
  model ran once; so does a repeat of a keyed continuation after the task answered another
  message since; so does a repeat after the server was killed (SIGKILL) and started again.
- With ``max_idempotency_keys_per_caller = 4``, ten keyed messages one after the other are all
  answered (the keys of completed tasks count as finished: the oldest are forgotten), and
  the file holds keys without an outcome row (none was written) and at most the bound.
- A repeat while a later message runs the task again gets its own answer (not 409).
- The store: at the bound, keys without an outcome whose task is not running (or was never
  stored) are forgotten with those that have one, oldest first; a key whose task runs, or
  whose request is under way here, is kept.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mail.store.base import InstanceKey
from mail.store.idempotency import KeyRecord, SqliteIdempotencyStore
from mail.store.sqlite import SqliteTaskStore
from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    parse_sse_stream,
    write_config,
)
from support.llm_thread import ThreadedLLM, mentions
from support.review_swarm import review_swarms_json
from support.scripted_llm import hang, reply, tool_call

pytestmark = pytest.mark.timeout(300)

BOUND = 4
ALICE = InstanceKey("s", "user", "alice")


def _rows(path: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path, timeout=10)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


class Swarm:
    """A server directory (swarm, key, config) that a server can be started on, again."""

    def __init__(self, directory: Path, llm: ThreadedLLM) -> None:
        self.directory = directory
        self.llm = llm
        self.name = f"idem-task-{uuid.uuid4().hex[:8]}"
        (directory / "swarms.json").write_text(
            json.dumps([review_swarms_json(self.name, llm.base_url)]), encoding="utf-8"
        )
        self.api_key = create_key(directory / "registries" / "keys.json", "user", "alice")
        self.bob_key = create_key(directory / "registries" / "keys.json", "user", "bob")
        self.database = directory / "data" / "mail.db"

    def start(self) -> ServerProcess:
        port = free_port()
        extra = f"max_idempotency_keys_per_caller = {BOUND}\n"
        config = write_config(self.directory, port=port, swarm=self.name, extra=extra)
        server = ServerProcess(self.directory, port, args=["--config", str(config)])
        server.start()
        return server

    def answer(self, token: str) -> None:
        """The model's answer (once) to the message that mentions `token`."""
        self.llm.queue(
            reply(tool_call("task_complete", {"finish_message": f"answer {token} 'quoted'"})),
            match=lambda r: mentions(r, token),
        )

    def post(
        self, server: ServerProcess, payload: dict[str, Any], key: str | None
    ) -> httpx.Response:
        headers = auth(self.api_key)
        if key is not None:
            headers["Idempotency-Key"] = f'"{key}"'
        return httpx.post(f"{server.base_url}/message", json=payload, headers=headers, timeout=60)

    def stream(
        self, server: ServerProcess, payload: dict[str, Any], key: str
    ) -> tuple[list[Any], bool]:
        """Bob's keyed stream read to its end: (its events but pings, whether replayed)."""
        headers = {**auth(self.bob_key), "Idempotency-Key": f'"{key}"'}
        body = {**payload, "stream": True}
        url = f"{server.base_url}/message"
        with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
            assert response.status_code == 200, response.read()
            events = [e for e in parse_sse_stream(response) if e.event != "ping"]
            return events, response.headers.get("idempotent-replayed") == "true"


@pytest.fixture
def swarm(tmp_path: Path) -> Iterator[Swarm]:
    with ThreadedLLM() as llm:
        yield Swarm(tmp_path, llm)


def _same_answer(first: httpx.Response, again: httpx.Response) -> None:
    assert first.status_code == 200, first.text
    assert again.status_code == first.status_code, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == first.headers["content-type"]
    assert again.content == first.content  # byte for byte


def test_a_repeat_after_the_answer_gets_the_same_bytes_from_the_task(swarm: Swarm) -> None:
    server = swarm.start()
    try:
        token = uuid.uuid4().hex
        swarm.answer(token)
        key, payload = str(uuid.uuid4()), {"body": f"question {token}"}
        first = swarm.post(server, payload, key)
        assert first.json()["response"] == f"answer {token} 'quoted'"
        _same_answer(first, swarm.post(server, payload, key))
        _same_answer(first, swarm.post(server, payload, key))  # (now from its outcome row)
        task_id = first.json()["task_id"]

        # A keyed continuation, then another message into the task: the repeat of the
        # continuation still gets its own answer (the first one after its first event).
        again, later = uuid.uuid4().hex, uuid.uuid4().hex
        swarm.answer(again)
        swarm.answer(later)
        follow_key = str(uuid.uuid4())
        follow_payload = {"body": f"more {again}", "task_id": task_id}
        follow = swarm.post(server, follow_payload, follow_key)
        assert follow.json()["response"] == f"answer {again} 'quoted'", follow.text
        last = swarm.post(server, {"body": f"last {later}", "task_id": task_id}, None)
        assert last.json()["response"] == f"answer {later} 'quoted'", last.text
        _same_answer(follow, swarm.post(server, follow_payload, follow_key))

        # Bob's stream, read to its end, then its repeat: attached to the task's events.
        streamed = uuid.uuid4().hex
        swarm.answer(streamed)
        stream_key = str(uuid.uuid4())
        for attempt in range(2):
            events, replayed = swarm.stream(server, {"body": f"s {streamed}"}, stream_key)
            assert events[-1].event == "task_complete", events
            assert replayed == (attempt == 1)

        # Past the bound, one after the other: the keys of completed tasks are forgotten.
        tokens = [uuid.uuid4().hex for _ in range(10)]
        for each in tokens:
            swarm.answer(each)
        for each in tokens:
            r = swarm.post(server, {"body": f"q {each}"}, str(uuid.uuid4()))
            assert r.status_code == 200, r.text
    finally:
        assert server.stop(timeout=60) == 0, server.logs()
    # Nothing ran twice: one model call per message (a task's later calls show its history).
    assert [len(swarm.llm.requests(each)) for each in (token, again, later)] == [3, 2, 1]
    assert [len(swarm.llm.requests(each)) for each in tokens] == [1] * len(tokens)
    rows = _rows(swarm.database, "SELECT status FROM idempotency_keys WHERE caller_id = 'alice'")
    assert 0 < len(rows) <= BOUND, rows
    assert (None,) in rows, rows  # answered, and no outcome row was written for them
    bob = _rows(swarm.database, "SELECT status FROM idempotency_keys WHERE caller_id = 'bob'")
    assert bob == [(None,)]  # the stream's: no outcome row (`STREAMED_OUTCOME`) either


def test_a_repeat_after_a_kill_9_gets_the_same_bytes(swarm: Swarm) -> None:
    server = swarm.start()
    token = uuid.uuid4().hex
    key, payload = str(uuid.uuid4()), {"body": f"question {token}"}
    try:
        swarm.answer(token)
        first = swarm.post(server, payload, key)
        assert first.status_code == 200, first.text
    finally:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGKILL)
        assert server.wait_exit(60) == -signal.SIGKILL
    server = swarm.start()
    try:
        _same_answer(first, swarm.post(server, payload, key))
    finally:
        assert server.stop(timeout=60) == 0, server.logs()
    assert len(swarm.llm.requests(token)) == 1


def test_a_repeat_while_a_later_message_runs_the_task_gets_its_own_answer(
    swarm: Swarm,
) -> None:
    server = swarm.start()
    try:
        token, later = uuid.uuid4().hex, uuid.uuid4().hex
        swarm.answer(token)
        key, payload = str(uuid.uuid4()), {"body": f"question {token}"}
        first = swarm.post(server, payload, key)
        assert first.status_code == 200, first.text
        swarm.llm.queue(  # the next message into the task: the model takes its time
            hang(3.0, then=reply(tool_call("task_complete", {"finish_message": "later"}))),
            match=lambda r: mentions(r, later),
        )
        follow = {"body": f"more {later}", "task_id": first.json()["task_id"]}
        sent = threading.Thread(target=swarm.post, args=(server, follow, None))
        sent.start()
        deadline = time.monotonic() + 60
        while not swarm.llm.requests(later):  # the task runs again
            assert time.monotonic() < deadline, "the later message never reached the model"
            time.sleep(0.01)
        _same_answer(first, swarm.post(server, payload, key))  # not "still running"
        sent.join(60)
    finally:
        assert server.stop(timeout=60) == 0, server.logs()


def _record(subject: str | None, created_at: float) -> KeyRecord:
    return KeyRecord("fp", created_at, created_at + 3600, subject=subject, context={"after": 0})


async def test_keys_of_tasks_that_are_not_running_count_as_finished(tmp_path: Path) -> None:
    path = tmp_path / "mail.db"
    tasks = SqliteTaskStore(path)
    await tasks.start()
    keys = SqliteIdempotencyStore(path)
    await keys.start()
    try:
        now = time.time()
        # Oldest first: answered with an outcome, task done, task running, task never
        # stored, a key of another route without a task, and one under way here (task done).
        for index, (key, subject) in enumerate(
            [
                ("outcome", "t-outcome"),
                ("done", "t-done"),
                ("running", "t-running"),
                ("lost", "t-lost"),
                ("other", None),
            ]
        ):
            assert await keys.take(ALICE, key, _record(subject, now - 100 + index)) is None
        assert await keys.take(ALICE, "busy", _record("t-busy", now - 50)) is None
        await keys.finish(ALICE, "outcome", 200, "application/json", b"{}")
        conn = sqlite3.connect(path)
        for task_id, running in [("t-done", 0), ("t-running", 1), ("t-busy", 0)]:
            conn.execute(
                "INSERT INTO tasks (swarm_name, caller_role, caller_id, task_id, is_running,"
                " start_time) VALUES ('s', 'user', 'alice', ?, ?, '')",
                (task_id, running),
            )
        conn.execute(  # another caller's task of the same id runs: not this key's task
            "INSERT INTO tasks (swarm_name, caller_role, caller_id, task_id, is_running,"
            " start_time) VALUES ('s', 'user', 'bob', 't-done', 1, '')"
        )
        conn.commit()
        conn.close()
        busy = frozenset({"busy"})  # under way here (the guard passes its requests' keys)
        assert await keys.evict_finished(ALICE, 2, busy) == 2
        left = {row[0] for row in _rows(path, "SELECT idem_key FROM idempotency_keys")}
        assert left == {"running", "lost", "other", "busy"}
        assert await keys.evict_finished(ALICE, 10, busy) == 1  # "lost": its task is not stored
        left = {row[0] for row in _rows(path, "SELECT idem_key FROM idempotency_keys")}
        assert left == {"running", "other", "busy"}
    finally:
        await keys.close()
        await tasks.close()
