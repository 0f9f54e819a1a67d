"""Another process holds the SQLite database's write lock (a `sqlite3` shell in a write
transaction, a backup tool): the server's writes wait for it. The server must say so: while
no write completes for 5 s, `/health` and `/status` report `degraded` with the reason (as for
a full disk), and once the lock is gone the waiting writes land.

Before, `/health` said `healthy` the whole time while every `POST /message` answered after
5 s with nothing stored (the log alone said `persistence is lagging`).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from server_fixtures import ServerProcess, auth, keyed_stub_server

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
