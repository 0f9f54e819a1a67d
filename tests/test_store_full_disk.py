"""A full disk under a running `mail server` (SQLite, the default store): nothing the server
acknowledged is lost, the server says it is degraded (and why) on /health, /status, /metrics
and the console while the writes fail, and they land once space is freed. A write given up
at shutdown is logged with the real cause.

The disk is real: a small tmpfs holding the database file, filled by the test until the
kernel answers ENOSPC (see support/full_disk.py).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_fixtures import ServerProcess, auth, create_key, free_port, write_config
from support.console_harness import ConsolePage, ConsoleServer
from support.full_disk import Filler, small_disk
from support.stub_agents import stub_swarms_json

pytestmark = pytest.mark.timeout(300)

POSTS = 100


def _inbox_swarm(directory: Path) -> None:
    """The stub swarm, its supervisor keeping an inbox: every message it is shown is filed
    there (one team-store write per task)."""
    swarms = stub_swarms_json()
    swarms[0]["agents"][0]["team_tools"] = ["inbox"]
    (directory / "swarms.json").write_text(json.dumps(swarms), encoding="utf-8")


class Server:
    def __init__(self, tmp_path: Path, disk: Path) -> None:
        self.directory = tmp_path / "srv"
        self.directory.mkdir()
        self.database = disk / "mail.db"
        _inbox_swarm(self.directory)
        keys = self.directory / "registries" / "keys.json"
        self.admin = create_key(keys, "admin", "root")
        self.user = create_key(keys, "user", "alice")
        port = free_port()
        extra = f'\n[server.store]\npath = "{self.database}"\n'
        config = write_config(self.directory, port=port, extra=extra)
        self.proc = ServerProcess(self.directory, port, args=["--config", str(config)])

    def get(self, path: str, key: str) -> httpx.Response:
        return httpx.get(f"{self.proc.base_url}{path}", headers=auth(key), timeout=30)

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.proc.base_url}/health", timeout=30).json()
        return body

    def post_many(self, count: int, prefix: str) -> list[httpx.Response]:
        """`count` POST /message, ten at a time (threads: the browser fixture owns an
        event loop in this thread)."""

        def one(i: int) -> httpx.Response:
            return httpx.post(
                f"{self.proc.base_url}/message",
                json={"body": f"{prefix} {i}", "subject": "note"},
                headers=auth(self.user),
                timeout=120,
            )

        with ThreadPoolExecutor(10) as pool:
            return list(pool.map(one, range(count)))

    def storage_metrics(self) -> dict[tuple[str, str], float]:
        text = self.get("/metrics", self.admin).text
        found: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            if family.name in ("mail_store_degraded", "mail_store_pending_writes"):
                for sample in family.samples:
                    found[(sample.name, sample.labels["store"])] = sample.value
                    if sample.name == "mail_store_degraded" and sample.value:
                        found[("reason", sample.labels["store"])] = sample.labels["reason"]  # type: ignore[assignment]
        return found


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk", "4m") as mounted:
        yield mounted


def _wait(condition: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _rows(database: Path, sql: str) -> int:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def test_inbox_writes_survive_a_full_disk_and_the_server_says_degraded(
    tmp_path: Path, disk: Path, browser: Any
) -> None:
    server = Server(tmp_path, disk)
    filler = Filler(disk)
    server.proc.start()
    try:
        warm = server.post_many(1, "warm-up")
        assert warm[0].status_code == 200, warm[0].text
        assert server.health()["status"] == "healthy"

        assert filler.fill() > 0
        answers = server.post_many(POSTS, "while full")
        assert [r.status_code for r in answers] == [200] * POSTS, answers[0].text

        # Degraded, with the reason, on every face while the writes fail.
        health = _wait(
            lambda: (h := server.health())["status"] == "degraded" and h, "/health degraded"
        )
        assert "disk is full" in health["reason"] and "team" in health["reason"], health
        status = server.get("/status", server.user).json()
        assert status["swarm"]["status"] == "degraded", status
        assert status["storage"]["status"] == "degraded", status
        assert "disk is full" in status["storage"]["reason"], status
        assert status["storage"]["pending_writes"] >= 1, status
        numbers = server.storage_metrics()
        assert numbers[("mail_store_degraded", "team")] == 1, numbers
        assert "disk is full" in str(numbers[("reason", "team")]), numbers
        assert numbers[("mail_store_pending_writes", "team")] >= 1, numbers

        console = ConsolePage(browser, ConsoleServer(server.proc, {"alice": server.user}), tmp_path)
        try:
            console.sign_in("alice")
            banner = console.page.locator(".server-alert")
            banner.wait_for(state="visible")
            assert "disk is full" in banner.inner_text()
            console.screenshot("degraded")
        finally:
            console.close()

        filler.free()
        _wait(lambda: server.health()["status"] == "healthy", "/health healthy again")
        _wait(
            lambda: server.get("/status", server.user).json()["storage"]["pending_writes"] == 0,
            "every queued write stored",
        )
        assert "reason" not in server.health()
        assert server.storage_metrics()[("mail_store_degraded", "team")] == 0
    finally:
        filler.free()
        assert server.proc.stop() == 0, server.proc.logs()

    # Every acknowledged task and every inbox entry is in the file.
    db = server.database
    assert _rows(db, "SELECT COUNT(*) FROM tasks") == POSTS + 1
    filed = _rows(db, "SELECT COUNT(*) FROM team_inbox WHERE agent_name = 'supervisor'")
    assert filed == POSTS + 1, server.proc.logs()[-3000:]
    assert "team inbox update failed" not in server.proc.logs()


def test_a_write_given_up_at_shutdown_logs_the_disk_full_error(tmp_path: Path, disk: Path) -> None:
    server = Server(tmp_path, disk)
    filler = Filler(disk)
    server.proc.start()
    try:
        assert server.post_many(1, "warm-up")[0].status_code == 200
        filler.fill()
        assert all(r.status_code == 200 for r in server.post_many(5, "doomed"))
        _wait(lambda: server.health()["status"] == "degraded", "/health degraded")
        server.proc.stop(timeout=60)
    finally:
        filler.free()
    logs = server.proc.logs()
    gave_up = [line for line in logs.splitlines() if "giving up on" in line]
    assert gave_up, logs[-3000:]
    assert all("database or disk is full" in line for line in gave_up), gave_up
    assert "cannot rollback" not in logs


def test_reads_while_the_disk_is_full_answer_at_once_and_summaries_wait_quietly(
    tmp_path: Path, disk: Path
) -> None:
    """With writes the full disk does not take, a read that needs them (GET /tasks, GET
    /task of a task that left memory, a message naming it) is refused at once with 503 and
    Retry-After: it waited 30 s for them (60 s for the message) before. The summaries of
    tasks that left memory meanwhile are stored once the disk has room, after one warning
    (they were retried every 250 ms, each failure logged with a traceback)."""
    server = Server(tmp_path, disk)
    filler = Filler(disk)
    server.proc.start()
    base = server.proc.base_url
    headers = auth(server.user)
    reads = {
        "GET /tasks": lambda: httpx.get(f"{base}/tasks", headers=headers, timeout=120),
        "GET /task": lambda: httpx.get(
            f"{base}/task", params={"task_id": first}, headers=headers, timeout=120
        ),
        "POST /message naming it": lambda: httpx.post(
            f"{base}/message",
            json={"body": "more", "task_id": first},
            headers=headers,
            timeout=120,
        ),
    }
    try:
        first = server.post_many(1, "before")[0].json()["task_id"]
        _wait(lambda: "summary" in _metadata(server.database, first), "the first task's summary")
        filler.fill()
        assert all(r.status_code == 200 for r in server.post_many(3, "while full"))
        _wait(lambda: server.health()["status"] == "degraded", "/health degraded")
        for what, read in reads.items():
            started = time.monotonic()
            answer = read()
            took = time.monotonic() - started
            assert answer.status_code == 503, (what, answer.text)
            assert answer.headers["Retry-After"] == "5", what
            assert "database or disk is full" in answer.json()["detail"], answer.text
            assert took < 10, f"{what} took {took:.1f}s"
        time.sleep(6)  # summaries that cannot be stored wait (one warning), not a storm
        filler.free()
        _wait(lambda: server.health()["status"] == "healthy", "/health healthy again")
        for what, read in reads.items():
            assert read().status_code == 200, what
        listed = _wait(lambda: (r := reads["GET /tasks"]()).status_code == 200 and r.json(), "list")
        assert len(listed) == 4, listed
    finally:
        filler.free()
        assert server.proc.stop() == 0, server.proc.logs()
    conn = sqlite3.connect(f"file:{server.database}?mode=ro", uri=True)
    try:
        kept = conn.execute(
            "SELECT COUNT(*) FROM tasks WHERE json_extract(metadata, '$.summary') IS NOT NULL"
        ).fetchone()[0]
    finally:
        conn.close()
    assert kept == 4, server.proc.logs()[-3000:]
    logs = server.proc.logs()
    assert "error while storing finished tasks' summaries" not in logs, logs[-3000:]
    assert "Traceback" not in logs, logs[-3000:]
    assert logs.count("cannot store the summaries of") <= 1, logs[-3000:]


def _metadata(database: Path, task_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT metadata FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    finally:
        conn.close()
    return json.loads(row[0]) if row else {}


def test_keyed_messages_and_webhook_changes_while_the_disk_is_full_answer_503_at_once(
    tmp_path: Path, disk: Path
) -> None:
    """While the full disk does not take the writes (the server says degraded), a message
    with an Idempotency-Key (every message MAILClient and the REPL send) and a webhook's
    creation are refused at once with 503 and Retry-After, as an unkeyed message naming a
    task is: the keyed one waited 30 s for the writes before its 503, and the webhook's
    creation was a 500 with the driver's traceback in the log. Once space is freed both
    go through."""
    server = Server(tmp_path, disk)
    filler = Filler(disk)
    server.proc.start()
    base = server.proc.base_url
    headers = auth(server.user)
    calls = {
        "keyed POST /message": lambda: httpx.post(
            f"{base}/message",
            json={"body": "keyed"},
            headers={**headers, "Idempotency-Key": "while-full-1"},
            timeout=120,
        ),
        "POST /webhooks": lambda: httpx.post(
            f"{base}/webhooks",
            json={"url": "https://8.8.8.8/mail", "events": ["*"]},
            headers=headers,
            timeout=120,
        ),
    }
    try:
        assert server.post_many(1, "before")[0].status_code == 200
        filler.fill()
        assert all(r.status_code == 200 for r in server.post_many(3, "while full"))
        _wait(lambda: server.health()["status"] == "degraded", "/health degraded")
        for what, call in calls.items():
            started = time.monotonic()
            answer = call()
            took = time.monotonic() - started
            assert answer.status_code == 503, (what, answer.text)
            assert answer.headers["Retry-After"] == "5", what
            assert took < 10, f"{what} took {took:.1f}s"
        filler.free()
        _wait(lambda: server.health()["status"] == "healthy", "/health healthy again")
        assert calls["keyed POST /message"]().status_code == 200
        assert calls["POST /webhooks"]().status_code == 201
    finally:
        filler.free()
        assert server.proc.stop() == 0, server.proc.logs()
    assert "unhandled error" not in server.proc.logs(), server.proc.logs()[-3000:]
