"""A byte bound set after tasks were stored without one counts those tasks.

Without `[server.store] max_stored_bytes_per_caller` the server does not measure what each
finished task stores (a query per table, for books nobody checks): the record it saves
when the task leaves memory has no size. When an operator then sets a bound and restarts,
the caller's books are read from the store and the tasks without a size are measured there,
so what was stored before the bound counts against it. Real ``mail server`` on SQLite.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from server_fixtures import ROOT_ALICE_BOB, keyed_stub_server, post_as, write_config

pytestmark = pytest.mark.timeout(300)

BODY = "x" * 200_000  # three of them store more than the bound set later
BOUND = 500_000


def _saved_summaries(db: Path) -> int:
    """Tasks whose record holds the summary saved when they left memory."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute(
            "SELECT count(*) FROM tasks WHERE json_extract(metadata, '$.summary') IS NOT NULL"
        ).fetchone()
        return int(row[0])
    finally:
        conn.close()


def test_byte_bound_set_later_counts_tasks_stored_without_one(tmp_path: Path) -> None:
    unbounded = "\n[server.store]\nmax_stored_bytes_per_caller = 0\n"
    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB, extra=unbounded) as server:
        for n in range(3):
            sent = post_as(server, "alice", {"body": f"{n} {BODY}", "subject": "s"}, timeout=60)
            assert sent.status_code == 200, sent.text
        db = tmp_path / "data" / "mail.db"
        deadline = time.monotonic() + 60
        while _saved_summaries(db) < 3:  # the sweep lets them go a few seconds after
            assert time.monotonic() < deadline, "finished tasks never left memory"
            time.sleep(0.2)
        assert server.stop() == 0, server.logs()
        bounded = f"\n[server.store]\nmax_stored_bytes_per_caller = {BOUND}\n"
        write_config(tmp_path, port=server.port, extra=bounded)
        server.start()
        refused = post_as(server, "alice", {"body": "one more", "subject": "s"}, timeout=60)
        assert refused.status_code == 429, refused.text
        assert "max_stored_bytes_per_caller" in refused.json()["detail"]
        other = post_as(server, "bob", {"body": "bob stores nothing yet", "subject": "s"})
        assert other.status_code == 200, other.text
        listed = httpx.get(
            f"{server.base_url}/tasks",
            headers={"Authorization": f"Bearer {server.keys['alice']}"},
            timeout=30,
        )
        assert listed.status_code == 200 and len(listed.json()) == 3
