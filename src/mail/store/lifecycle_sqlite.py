"""`TaskLifecycle` of the SQLite store (`mail.store.lifecycle`): its statements run on the database's
one thread. Here: SQLite's spellings, and the space the file takes and gives back."""

from __future__ import annotations

from typing import Any

from mail.store.lifecycle import TaskLifecycle
from mail.store.records import normalize_start_time
from mail.store.sql import SqliteSql
from mail.store.sqlite_space import (
    VACUUM_STEP_PAGES,
    SpaceReport,
    file_bytes,
    space_report,
    truncate_wal,
    vacuum_step,
)


class SqliteLifecycle(TaskLifecycle):
    postgres = False
    _TIME = "TEXT"
    _INSERTION = "rowid"
    # The record's `summary` key replaced by SQLite's own JSON code: the same shallow merge as
    # `mail_merge(metadata, '{"summary": ...}')`, without a call into Python per row.
    _WITH_SUMMARY = "json_set(COALESCE(NULLIF(metadata, ''), '{}'), '$.summary', json(?5))"
    _KEY_BYTES = "COALESCE(length(CAST(body AS BLOB)), 0) + length(context)"

    @property
    def _db(self) -> Any:
        return self.store.db  # type: ignore[attr-defined]

    def _sql(self, unavailable: str | None) -> SqliteSql:
        return SqliteSql(self._db)

    def _start_text(self, value: Any) -> str:
        return normalize_start_time(value)

    async def reclaim_space(self, max_pages: int | None = None) -> int:
        # Step by step: the store's write batches run on the same thread in between.
        before = await self._db.run(file_bytes)
        done = 0
        while max_pages is None or done < max_pages:
            step = (
                VACUUM_STEP_PAGES if max_pages is None else min(VACUUM_STEP_PAGES, max_pages - done)
            )
            left = await self._db.run(vacuum_step, step)
            done += step
            if not left:
                break
        await self._db.run(truncate_wal)
        return max(0, before - await self._db.run(file_bytes))  # type: ignore[no-any-return]

    async def space(self) -> SpaceReport:
        await self._settle()
        return await self._db.run(space_report)  # type: ignore[no-any-return]
