"""A keyed streamed ``POST /message`` whose stream ends early (the client hangs up after
the first event, the model fails, the server is stopped mid-stream): afterwards a repeat of
the key attaches to the one task and replays it, never "still under way" for ever, and no
second task runs; the ended streams' keys are among those forgotten at the per-caller bound
(two keys here: the third stream's key needs one of them gone) (a real `mail server`, the scripted model; SQLite and PostgreSQL). The
stream's end is told by `EventStreamResponse.on_end` (no wrapper around the stream)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.pg_schema import BASE_URL, scratch_schema, with_search_path

from server_fixtures import ServerProcess, auth, parse_sse_stream
from support.llm_thread import ThreadedLLM, mentions
from support.review_server import review_server
from support.scripted_llm import error, hang, reply, tool_call

pytestmark = pytest.mark.timeout(300)

THINKING = 2.0
BOUND = "max_idempotency_keys_per_caller = 2\n"


@pytest.fixture
def llm() -> Iterator[ThreadedLLM]:
    with ThreadedLLM() as model:
        yield model


def keyed_stream(
    srv: ServerProcess, key: str, payload: dict[str, Any]
) -> tuple[int, dict[str, str], list[Any]]:
    """Read a keyed stream to its end; 409s retried (a repeat while the first is under way
    here is told to wait) for at most 60 s."""
    deadline = time.monotonic() + 60
    while True:
        headers = {**auth(srv.keys["u"]), "Idempotency-Key": key}
        with httpx.stream(
            "POST", f"{srv.base_url}/message", json=payload, headers=headers, timeout=60
        ) as r:
            if r.status_code == 409 and time.monotonic() < deadline:
                r.read()
                time.sleep(0.2)
                continue
            if r.status_code != 200:
                r.read()
                return r.status_code, dict(r.headers), [r.text]
            events = [e for e in parse_sse_stream(r) if e.event != "ping"]
            return 200, dict(r.headers), events


def open_and_drop_after_first_event(srv: ServerProcess, key: str, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    head = (
        f"POST /message HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {srv.keys['u']}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as conn:
        conn.sendall(head + body)
        got = b""
        while b"\nid:" not in got and b"\ndata:" not in got:
            chunk = conn.recv(4096)
            assert chunk, got
            got += chunk


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The server's environment: its own PostgreSQL schema, or none (its SQLite file)."""
    if request.param == "postgres":
        with scratch_schema("mail_idem_stream_end", BASE_URL) as schema:
            yield {"DATABASE_URL": with_search_path(BASE_URL, schema)}
    else:
        yield {}


def test_dropped_errored_and_stopped_streams_free_their_key(
    llm: ThreadedLLM, tmp_path: Path, database: dict[str, str]
) -> None:
    dropped, failed, stopped = (uuid.uuid4().hex for _ in range(3))
    llm.queue(
        hang(THINKING, then=reply(tool_call("task_complete", {"finish_message": "a1"}))),
        match=lambda r: mentions(r, dropped),
    )
    llm.queue(error(400, "bad request"), match=lambda r: mentions(r, failed))
    llm.queue(
        hang(8.0, then=reply(tool_call("task_complete", {"finish_message": "a3"}))),
        match=lambda r: mentions(r, stopped),
    )
    keys = {t: f'"{uuid.uuid4()}"' for t in (dropped, failed, stopped)}
    payload = {t: {"body": f"q {t}", "stream": True} for t in keys}
    with review_server(tmp_path, llm.base_url, ["u"], prefix="sea", extra=BOUND) as srv:
        if database:  # (started on its SQLite file: again on its own schema)
            assert srv.stop(timeout=60) == 0, srv.logs()
            srv.env = database
            srv.start()
        open_and_drop_after_first_event(srv, keys[dropped], payload[dropped])
        status, headers, events = keyed_stream(srv, keys[dropped], payload[dropped])
        assert status == 200, events
        assert events[-1].event == "task_complete", [e.event for e in events]
        status, headers, again = keyed_stream(srv, keys[dropped], payload[dropped])
        assert status == 200 and headers.get("idempotent-replayed") == "true", again
        assert len(llm.requests(dropped)) == 1

        status, headers, events = keyed_stream(srv, keys[failed], payload[failed])
        assert status == 200, events
        status, headers, again = keyed_stream(srv, keys[failed], payload[failed])
        assert status == 200 and headers.get("idempotent-replayed") == "true", again
        assert [e.event for e in again][-1] == [e.event for e in events][-1]

        # a stream under way when the server stops
        body = json.dumps(payload[stopped]).encode()
        head = (
            f"POST /message HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {srv.keys['u']}\r\nIdempotency-Key: {keys[stopped]}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        conn = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        conn.sendall(head + body)
        deadline = time.monotonic() + 30
        while not llm.requests(stopped):
            conn.setblocking(False)
            try:
                early = conn.recv(4096)  # a refusal (429 at the bound) comes at once
            except BlockingIOError:
                early = b""
            finally:
                conn.setblocking(True)
            assert not early.startswith(b"HTTP/1.1 4"), early
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert srv.stop(timeout=60) == 0, srv.logs()
        conn.close()
        calls = len(llm.requests(stopped))
        srv.start()
        status, headers, events = keyed_stream(srv, keys[stopped], payload[stopped])
        assert status != 409, events
        assert status == 200 and headers.get("idempotent-replayed") == "true", events
        assert events[0].event == "new_message", [e.event for e in events]
        assert [e.event for e in events].count("new_message") == 1
        # (the turn the stop cut short runs again: at least once, docs/database.md)
        assert calls == 1
        r = httpx.get(f"{srv.base_url}/tasks", headers=auth(srv.keys["u"]), timeout=30)
        assert len(r.json()) == 3, r.json()  # one task per key
        # (the oldest, the dropped stream's key, made room for the third)
        status, headers, again = keyed_stream(srv, keys[failed], payload[failed])
        assert status == 200 and headers.get("idempotent-replayed") == "true", again


def test_one_key_streamed_twice_at_once_runs_one_task(
    llm: ThreadedLLM, tmp_path: Path, database: dict[str, str]
) -> None:
    """Two identical keyed streams at once (the key taken by one, in one synchronous step
    on SQLite): both read the one task's events to its end, one of them attached
    (``Idempotent-Replayed``); the model is called once."""
    token = uuid.uuid4().hex
    llm.queue(
        hang(THINKING, then=reply(tool_call("task_complete", {"finish_message": "one"}))),
        match=lambda r: mentions(r, token),
    )
    key, payload = f'"{uuid.uuid4()}"', {"body": f"q {token}", "stream": True}
    with review_server(tmp_path, llm.base_url, ["u"], prefix="seb") as srv:
        if database:
            assert srv.stop(timeout=60) == 0, srv.logs()
            srv.env = database
            srv.start()
        results: list[Any] = [None, None]

        def run(n: int) -> None:
            results[n] = keyed_stream(srv, key, payload)

        threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert all(r is not None and r[0] == 200 for r in results), results
        ends = [r[2][-1] for r in results]
        assert all(e.event == "task_complete" for e in ends), ends
        assert {e.json()["task_id"] for e in ends} == {ends[0].json()["task_id"]}
        assert sorted(r[1].get("idempotent-replayed", "") for r in results) == ["", "true"]
        assert len(llm.requests(token)) == 1
