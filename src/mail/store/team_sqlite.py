"""SQLite TeamStore (`team_base`), in the server's database file: it shares the task store's
`SqliteDatabase` (one connection, one thread, one writer). Here: what SQLite spells its own
way."""

from __future__ import annotations

from pathlib import Path

from mail.store.sql import SqliteSql
from mail.store.sqlite_schema import MEMORY, is_transient_error, open_database, utc_now
from mail.store.team_base import TeamStore


class SqliteTeamStore(TeamStore):
    postgres = False
    _EMPTY_DATA = "X''"
    _THREAD_ORDER = "created_at, rowid"
    _ROW_ID = "rowid"
    _CUTOFF_TIME = "?1"
    _THREAD_CREATED = "created_at"

    def __init__(self, path: str | Path = MEMORY) -> None:
        """`path`: the server's database file; by default (`MEMORY`) a private in-memory
        database, ready without `start` and gone with the store (`--store memory`)."""
        self.db = open_database(path)
        self.sql = SqliteSql(self.db)
        self._started = False
        self._direct = self.db.in_memory
        if not self._direct:
            self._init_writes(is_transient_error)

    async def start(self) -> None:
        if not self._started:
            await self.db.acquire_for_store()
            self._started = True
            if not self._direct:
                self.writes.start()

    async def close(self) -> None:
        if self._started:
            self._started = False
            if not self._direct:
                await self.writes.close()
            await self.db.release()

    def _created_at(self) -> str:
        return utc_now()
