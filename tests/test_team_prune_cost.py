"""Retention's team prune on SQLite does work in proportion to the table, not to the table
times the number of batches.

Retention keeps the team rows of a task that still runs or waits (`prune_before`), whatever
their age. Such rows are older than the cutoff yet stay: a prune that searched each batch
from the start of the table read them again for every batch of 500 rows it removed (a
paused task's 5,000 old posts ahead of 40,000 expired ones: 80 batches, 400,000 extra rows
read, every round). Counted in SQLite virtual-machine steps (a progress handler), so the
test does not depend on the machine's speed.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path

from mail.store.base import InstanceKey
from mail.store.sqlite import SqliteTaskStore
from mail.store.team_base import SqliteTeamStore

KEY = InstanceKey("prune-cost", "user", "u")
EXPIRED = 40_000
STEP = 1000  # VM instructions per progress-handler call


async def _prune_steps(path: Path, kept: int) -> tuple[int, int]:
    """(rows removed, VM steps/STEP) of one prune of `kept` old posts of a paused task
    followed by EXPIRED old posts of finished tasks."""
    tasks = SqliteTaskStore(path, batch_delay=0.005)
    team = SqliteTeamStore(path)
    await tasks.start()
    await team.start()
    try:
        record = {"task_owner": "x", "start_time": "2025-03-01T10:00:00+00:00"}
        await tasks.upsert_task(
            KEY,
            {
                **record,
                "task_id": "paused",
                "is_running": False,
                "completed": False,
                "state": "paused",
            },
        )
        for n in range(10):
            await tasks.upsert_task(
                KEY,
                {
                    **record,
                    "task_id": f"done-{n}",
                    "is_running": False,
                    "completed": True,
                    "state": "completed",
                },
            )
        assert await tasks.flush(timeout=30)
        old = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)).isoformat()

        def fill(conn: sqlite3.Connection) -> None:
            rows = [("paused", f"k-{n}") for n in range(kept)]
            rows += [(f"done-{n % 10}", f"x-{n}") for n in range(EXPIRED)]
            with conn:
                # The finished tasks last changed long ago too: a kept task keeps its posts.
                conn.execute("UPDATE tasks SET updated_at = ? WHERE task_id LIKE 'done-%'", (old,))
                conn.executemany(
                    "INSERT INTO team_posts (swarm_name, caller_role, caller_id, thread_id,"
                    " record) VALUES (?, ?, ?, 'th', ?)",
                    [
                        (
                            KEY.swarm_name,
                            KEY.caller_role,
                            KEY.caller_id,
                            json.dumps({"post_id": p, "timestamp": old, "task_id": t}),
                        )
                        for t, p in rows
                    ],
                )

        await team.db.run(fill)
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        await team.db.run(lambda conn: conn.set_progress_handler(count, STEP))
        try:
            removed = await team.prune_before(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
        finally:
            await team.db.run(lambda conn: conn.set_progress_handler(None, STEP))
        return removed, steps[0]
    finally:
        await team.close()
        await tasks.close()


async def test_rows_kept_for_a_live_task_are_not_read_again_for_every_batch(
    tmp_path: Path,
) -> None:
    removed, alone = await _prune_steps(tmp_path / "alone.db", 0)
    assert removed == EXPIRED
    kept = 5_000
    removed, behind = await _prune_steps(tmp_path / "behind.db", kept)
    assert removed == EXPIRED
    # Reading the kept rows once costs about what reading as many expired rows costs
    # (kept / EXPIRED of `alone`); reading them once per batch cost ~10x `alone` here.
    assert behind < alone * 2, (alone, behind)
    print(f"VM steps x{STEP}: {alone} without kept rows, {behind} behind {kept} kept rows")
