"""`TaskLifecycle` of the PostgreSQL store (`mail.store.lifecycle`), on the store's connection pool:
here PostgreSQL's spellings."""

from __future__ import annotations

from typing import Any

from mail.store.lifecycle import TaskLifecycle
from mail.store.postgres import _isoformat, _pg_json
from mail.store.records import StoreUnavailableError, parse_start_time
from mail.store.sql import PostgresSql


class PostgresLifecycle(TaskLifecycle):
    postgres = True
    _TIME = "timestamptz"
    _INSERTION = "created_at"
    _WITH_SUMMARY = "COALESCE(metadata, '{}'::jsonb) || jsonb_build_object('summary', ?5::jsonb)"
    _KEY_BYTES = "COALESCE(octet_length(body), 0) + octet_length(context)"
    _json = staticmethod(_pg_json)

    def _pool(self) -> Any:
        pool = self.store._pool  # type: ignore[attr-defined]
        if pool is None:
            raise StoreUnavailableError("the PostgreSQL store is not started")
        return pool

    def _sql(self, unavailable: str | None) -> PostgresSql:
        return PostgresSql(self._pool, unavailable)

    def _start_text(self, value: Any) -> str:
        return _isoformat(value)

    def _start_arg(self, text: str) -> Any:
        return parse_start_time(text)
