"""The WAL between two checkpoints, when a batch's rows land on many different pages.

bench/results-store.md ("The SQLite write path"): the server checkpoints once about
CHECKPOINT_PAGES (1,000) pages were written, estimated per batch as 4 + rows // 2 + content
bytes // 4096 ("small rows share b-tree leaves"), and a checkpoint then finds 950-1,200 WAL
frames (about 4 MiB). That holds when a batch's rows are neighbours (bench/store.py). Here
every batch updates 500 tasks of many callers in random order (a busy server with thousands
of tasks: each row its own leaf in the table and in each index), and the WAL a checkpoint
finds must stay within twice the documented figure.
"""

from __future__ import annotations

import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

import mail.store.sqlite_schema as sqlite_schema
from mail.store.base import InstanceKey
from mail.store.sqlite import SqliteTaskStore

FRAME_BYTES = 4096 + 24


async def test_scattered_task_writes_checkpoint_near_the_documented_page_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found: list[int] = []  # WAL frames each checkpoint found

    def checkpoint(conn: sqlite3.Connection) -> None:
        busy, log, _done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if not busy:
            found.append(log)

    monkeypatch.setattr(sqlite_schema, "_checkpoint", checkpoint)
    store = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.02)
    await store.start()
    wal = tmp_path / "mail.db-wal"
    rng = random.Random(1)
    keys = [InstanceKey("swarm", "user", f"u-{uuid.uuid4().hex}") for _ in range(6000)]
    tasks = [(rng.choice(keys), uuid.uuid4().hex) for _ in range(30000)]
    peak = 0
    try:
        for turn in range(3):
            rng.shuffle(tasks)
            for start in range(0, len(tasks), 500):
                for key, task_id in tasks[start : start + 500]:
                    record: dict[str, Any] = {
                        "task_id": task_id,
                        "is_running": turn % 2 == 0,
                        "title": f"turn {turn}",
                        "start_time": "2025-01-01T00:00:00+00:00",
                        "state": "running" if turn % 2 == 0 else "paused",
                    }
                    assert store.write_nowait(key, "upsert_task", record)
                assert await store.flush(timeout=60)
                peak = max(peak, wal.stat().st_size if wal.exists() else 0)
    finally:
        await store.close()
    assert len(found) >= 5, found
    assert max(found) <= 2 * sqlite_schema.CHECKPOINT_PAGES, sorted(found)
    assert peak <= 2 * sqlite_schema.CHECKPOINT_PAGES * FRAME_BYTES, peak
