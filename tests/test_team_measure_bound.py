"""A caller's team data (threads, posts, inbox entries, attachments) is measured from the
store only under a byte bound (`[server.store] max_stored_bytes_per_caller`), the one
thing the figure is for. Measuring reads every byte of the caller's team rows; it ran for
every caller at most every 10 s while it sent, at every books read and for every caller
after each retention round that removed team rows, also with `max_stored_bytes_per_caller
= 0`, where nothing looks at it.

Real `SqliteTaskStore`, `SqliteTeamStore` and `FinishedTasks`; the team store's
`stored_bytes` is wrapped to count the measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mail.server.finished_tasks import FinishedTasks, StorageQuota
from mail.store.sqlite import SqliteTaskStore
from mail.store.team_base import SqliteTeamStore
from support.bare_instances import bare_manager

pytestmark = pytest.mark.timeout(120)

OWNER = ("user", "alice")
DATA = b"x" * 50_000


@pytest.mark.parametrize("max_bytes", [0, 10_000_000])
async def test_team_data_is_measured_only_under_a_byte_bound(
    tmp_path: Path, max_bytes: int
) -> None:
    store = SqliteTaskStore(tmp_path / "mail.db", batch_delay=0.005)
    team = SqliteTeamStore(tmp_path / "mail.db")
    await store.start()
    await team.start()
    try:
        quota = StorageQuota(max_bytes=max_bytes, max_tasks=10)
        finished = FinishedTasks(bare_manager(60.0), store, quota, team)
        record = {"attachment_id": "a-1", "filename": "big.bin", "size": len(DATA)}
        await team.put_attachment(finished.key(*OWNER), record, DATA)
        measured: list[Any] = []
        stored_bytes = team.stored_bytes

        async def counted(key: Any) -> int:
            measured.append(key)
            return await stored_bytes(key)

        team.stored_bytes = counted  # type: ignore[method-assign]

        books = await finished.books(*OWNER)
        await finished.measure_team(OWNER, force=True)  # as after a retention round
        await finished.save_pending()
        if max_bytes:
            assert measured, "the byte bound needs the caller's team data"
            assert books.team_bytes >= len(DATA)
        else:
            assert measured == [], f"measured {len(measured)} times without a byte bound"
            assert books.team_bytes == 0
    finally:
        await team.close()
        await store.close()
