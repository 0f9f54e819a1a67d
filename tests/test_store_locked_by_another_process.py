"""Another process holds the SQLite database's write lock (a `sqlite3` shell in a write
transaction, a backup tool): the server's writes wait for it. The server must say so: while
no write completes for 5 s, `/health` and `/status` report `degraded` with the reason (as for
a full disk), and once the lock is gone the waiting writes land.

Before, `/health` said `healthy` the whole time while every `POST /message` answered after
5 s with nothing stored (the log alone said `persistence is lagging`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from itertools import pairwise

import httpx
import pytest

from server_fixtures import ServerProcess, auth, keyed_stub_server, parse_sse_stream

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {"alice": ("user", "alice")}
    with keyed_stub_server(tmp_path_factory.mktemp("locked"), keys) as proc:
        yield proc


def _health(server: ServerProcess) -> dict[str, object]:
    body: dict[str, object] = httpx.get(f"{server.base_url}/health", timeout=30).json()
    return body


def _wait_for(condition: object, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_writes_held_by_another_process_make_the_server_degraded(server: ServerProcess) -> None:
    headers = auth(server.keys["alice"])
    warm = httpx.post(
        f"{server.base_url}/message", json={"body": "warm"}, headers=headers, timeout=60
    )
    assert warm.status_code == 200, warm.text
    assert _health(server)["status"] == "healthy"

    lock = sqlite3.connect(server.directory / "data" / "mail.db", isolation_level=None, timeout=10)
    answers: list[httpx.Response] = []
    try:
        lock.execute("BEGIN IMMEDIATE")  # the write lock, held until the rollback below

        def post() -> None:
            answers.append(
                httpx.post(
                    f"{server.base_url}/message",
                    json={"body": "while locked"},
                    headers=headers,
                    timeout=120,
                )
            )

        sender = threading.Thread(target=post)
        sender.start()
        # Well within SQLite's own 30 s wait for the lock (past it, the write fails and the
        # store is degraded for that reason).
        _wait_for(lambda: _health(server)["status"] == "degraded", "/health degraded", 20)
        health = _health(server)
        assert "no write completed" in str(health.get("reason")), health
        status = httpx.get(f"{server.base_url}/status", headers=headers, timeout=30).json()
        assert status["storage"]["status"] == "degraded", status
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    _wait_for(lambda: _health(server)["status"] == "healthy", "/health healthy again", 60)
    sender.join(120)
    assert answers and answers[0].status_code == 200, answers
    task_id = answers[0].json()["task_id"]
    database = server.directory / "data" / "mail.db"

    def stored() -> bool:
        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:
            sql = "SELECT COUNT(*) FROM tasks WHERE task_id = ?"
            return bool(conn.execute(sql, (task_id,)).fetchone()[0])
        finally:
            conn.close()

    _wait_for(stored, "the task answered while the lock was held to be stored", 30)


def _a2a_stream_events(server: ServerProcess, key: str, text: str) -> list[dict[str, object]]:
    """Every event of an A2A `SendStreamingMessage` carrying `text`, until the stream ends."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": f"m-{text}", "parts": [{"text": text}]}
        },
    }
    headers = {**auth(key), "A2A-Version": "1.0"}
    events: list[dict[str, object]] = []
    url = f"{server.base_url}/a2a"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[len("data:") :]))
    return events


def test_an_a2a_stream_refused_while_the_store_is_held_says_503(server: ServerProcess) -> None:
    """An A2A message the store cannot take is refused as `POST /message` is (503): the stream
    says so in a rejected status instead of closing with no event at all."""
    headers = auth(server.keys["alice"])
    lock = sqlite3.connect(server.directory / "data" / "mail.db", isolation_level=None, timeout=10)
    sender: threading.Thread | None = None
    try:
        lock.execute("BEGIN IMMEDIATE")
        sender = threading.Thread(
            target=lambda: httpx.post(
                f"{server.base_url}/message", json={"body": "held"}, headers=headers, timeout=120
            )
        )
        sender.start()
        _wait_for(lambda: _health(server)["status"] == "degraded", "/health degraded", 20)
        events = _a2a_stream_events(server, server.keys["alice"], "while held")
    finally:
        lock.execute("ROLLBACK")
        lock.close()
        if sender is not None:
            sender.join(120)
    statuses = [
        e["result"]["statusUpdate"]["status"] for e in events if "statusUpdate" in e["result"]
    ]  # type: ignore[index, operator]
    assert statuses, events
    last = statuses[-1]
    assert last["state"] == "TASK_STATE_REJECTED", events
    assert "503" in json.dumps(last["message"]), events


def test_a_stream_waiting_for_its_commit_keeps_pinging(server: ServerProcess) -> None:
    """The lock is taken while the task works: its last events cannot be written, and they
    wait for their commit, the stream's closing event behind them (until the store reports
    the outage). Meanwhile the stream keeps sending pings (`sse_ping_interval`, 0.3 s here),
    so no proxy or client ends it as idle: they go out ahead of the events that wait (a ping
    has no id and is not stored). Before, they queued behind those events: nothing for 5 s,
    then a burst of pings."""
    headers = auth(server.keys["alice"])
    body = {"body": "SLEEP 2 hello", "stream": True}
    lock = sqlite3.connect(server.directory / "data" / "mail.db", isolation_level=None, timeout=10)
    events = []
    arrived: list[float] = []
    try:
        with httpx.stream(
            "POST", f"{server.base_url}/message", json=body, headers=headers, timeout=120
        ) as response:
            assert response.status_code == 200, response.read()
            for event in parse_sse_stream(response):
                if not events:  # acknowledged (stored): now hold the writes of the rest
                    lock.execute("BEGIN IMMEDIATE")
                events.append(event)
                arrived.append(time.monotonic())
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    names = [event.event for event in events]
    assert names[-1] == "task_complete", names
    ids = [int(event.id) for event in events if event.id is not None]
    assert ids == sorted(ids) and len(ids) > 1, names
    # The task's last events waited about 5 s for the outage to be reported (the lock was
    # held): the stream was not silent for that long (pings every 0.3-0.5 s; 3 s is slack
    # for loaded cores).
    assert arrived[-1] - arrived[0] > 4, names
    gaps = [later - earlier for earlier, later in pairwise(arrived)]
    assert max(gaps) < 3, (max(gaps), names)
    # The wait went in rounds of 0.5 s, logged at most every 5 s (it was logged every round).
    assert server.logs().count("persistence is lagging") <= 2, server.logs()
    _wait_for(lambda: _health(server)["status"] == "healthy", "/health healthy again", 60)
