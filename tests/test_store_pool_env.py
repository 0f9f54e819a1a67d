"""MAIL_DB_POOL_MIN / MAIL_DB_POOL_MAX bound the task store's pool (small in cluster actors)."""

from __future__ import annotations

import pytest

from mail.server.state import pool_sizes_from_env


def test_pool_sizes_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAIL_DB_POOL_MIN", raising=False)
    monkeypatch.delenv("MAIL_DB_POOL_MAX", raising=False)
    assert pool_sizes_from_env() == {}
    monkeypatch.setenv("MAIL_DB_POOL_MIN", "1")
    monkeypatch.setenv("MAIL_DB_POOL_MAX", "4")
    assert pool_sizes_from_env() == {"min_size": 1, "max_size": 4}
    monkeypatch.setenv("MAIL_DB_POOL_MAX", "0")  # never below the minimum or 1
    assert pool_sizes_from_env() == {"min_size": 1, "max_size": 1}
    monkeypatch.setenv("MAIL_DB_POOL_MIN", "many")
    assert pool_sizes_from_env() == {"max_size": 1}
