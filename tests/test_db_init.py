"""`mail db-init` run as a real subprocess against the real PostgreSQL.

Each test works in a schema of its own (selected through the URL's search_path), so the
command's CREATE TABLE statements never touch anything else.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
from tests.support.pg_schema import TASK_TABLES, fetch_rows

BASE_URL = os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def _execute(sql: str, url: str = BASE_URL) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def schema_url() -> Iterator[str]:
    schema = f"mail_dbinit_{uuid.uuid4().hex[:12]}"
    try:
        asyncio.run(_execute(f"CREATE SCHEMA {schema}"))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        if os.environ.get("MAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required but unreachable at {BASE_URL}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {BASE_URL}: {exc}")
    yield f"{BASE_URL}{'&' if '?' in BASE_URL else '?'}search_path={schema}"
    asyncio.run(_execute(f"DROP SCHEMA {schema} CASCADE"))


def mail(args: list[str], cwd: Path, database_url: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "mail.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _tables(url: str) -> dict[str, set[str]]:
    rows = await fetch_rows(
        url,
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema()",
    )
    columns: dict[str, set[str]] = {}
    for row in rows:
        columns.setdefault(row["table_name"], set()).add(row["column_name"])
    return columns


def test_db_init_twice_is_harmless(schema_url: str, tmp_path: Path) -> None:
    first = mail(["db-init"], tmp_path, schema_url)
    assert first.returncode == 0, first.stderr
    for table in TASK_TABLES:
        assert f"Setting up table {table} ... created" in first.stdout
        assert f"  {table}: OK" in first.stdout
    # Every table it sets up (tasks, webhooks, idempotency keys, ...) is counted once.
    made = first.stdout.count("Setting up table ")
    assert made >= len(TASK_TABLES) + 4  # the task tables, 3 webhook tables, the idempotency keys
    assert (
        f"Database initialization complete ({made} table(s) created, 0 already present)."
        in first.stdout
    )

    columns = asyncio.run(_tables(schema_url))
    assert set(TASK_TABLES) <= set(columns)
    assert {
        "swarm_name",
        "caller_role",
        "caller_id",
        "tool_format",
        "task_id",
        "agent_name",
        "history",
        "created_at",
        "updated_at",
        "id",
    } <= columns["agent_histories"]
    assert {
        "task_owner",
        "task_contributors",
        "remote_swarms",
        "is_running",
        "completed",
        "title",
        "start_time",
    } <= columns["tasks"]
    assert {"event_type", "event_data", "event_id"} <= columns["task_events"]
    assert "response" in columns["task_responses"]
    assert {
        "swarm_name",
        "caller_role",
        "caller_id",
        "generation",
        "claimed_at",
        "holder",
    } == columns["instance_generations"]

    second = mail(["db-init"], tmp_path, schema_url)
    assert second.returncode == 0, second.stderr
    assert "Setting up table tasks ... already present" in second.stdout
    assert f"(0 table(s) created, {made} already present)" in second.stdout
    assert asyncio.run(_tables(schema_url)) == columns


def test_without_database_url_the_sqlite_file_is_initialised(tmp_path: Path) -> None:
    import sqlite3

    (tmp_path / "mail.toml").write_text('[server.swarm]\nregistry = "registries/x.json"\n')
    first = mail(["db-init"], tmp_path, None)
    assert first.returncode == 0, first.stderr
    assert "Applying schema version 1" in first.stdout
    db = tmp_path / "data" / "mail.db"
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert set(TASK_TABLES) | {"schema_version", "team_threads", "team_inbox"} <= tables
    again = mail(["db-init", "--sqlite", str(db)], tmp_path, None)
    assert again.returncode == 0 and "already up to date" in again.stdout, again.stdout


def test_memory_store_without_database_url_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "mail.toml").write_text('[server.store]\nkind = "memory"\n')
    result = mail(["db-init"], tmp_path, None)
    assert result.returncode == 1
    assert "DATABASE_URL is not set" in result.stderr
    assert result.stdout == ""


def test_connection_failure_is_one_line_and_hides_the_password(tmp_path: Path) -> None:
    result = mail(
        [
            "db-init",
            "--database-url",
            "postgresql://postgres:s3cret@127.0.0.1:1/test",
            "--timeout",
            "3",
        ],
        tmp_path,
        None,
    )
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1 and error_lines[0].startswith("Error: cannot connect")
    assert "s3cret" not in result.stderr + result.stdout


def test_a_search_path_schema_that_does_not_exist_is_named(schema_url: str, tmp_path: Path) -> None:
    missing = f"{schema_url.rsplit('=', 1)[1]}_not_made"
    url = f"{schema_url.rsplit('=', 1)[0]}={missing}"
    result = mail(["db-init", "--database-url", url], tmp_path, None)
    assert result.returncode == 1
    assert (
        f"no schema to create MAIL's tables in: search_path ({missing}) names none that exists "
        "and this user may use: create it (CREATE SCHEMA <name>)" in result.stderr
    ), result.stderr


@pytest.mark.parametrize("secret_param", ["password", "sslpassword"])
def test_a_password_in_the_query_string_is_never_printed(tmp_path: Path, secret_param: str) -> None:
    url = f"postgresql://postgres@127.0.0.1:1/test?sslmode=disable&{secret_param}=qu3rys3cret"
    result = mail(["db-init", "--database-url", url, "--timeout", "3"], tmp_path, None)
    assert result.returncode == 1
    assert "qu3rys3cret" not in result.stderr + result.stdout
    assert f"{secret_param}=***" in result.stdout + result.stderr


def test_dotenv_and_flag(schema_url: str, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"DATABASE_URL={schema_url}\n", encoding="utf-8")
    from_file = mail(["db-init"], tmp_path, None)
    assert from_file.returncode == 0, from_file.stderr
    # The flag wins over a (broken) environment variable.
    flagged = mail(
        ["db-init", "--database-url", schema_url], tmp_path, "postgresql://x@127.0.0.1:1/no"
    )
    assert flagged.returncode == 0, flagged.stderr
    assert "already present" in flagged.stdout


def test_upgrades_a_database_initialised_by_the_original(schema_url: str, tmp_path: Path) -> None:
    """Tables without our extra columns and with duplicated history rows (BEHAVIOR §13.20)."""

    async def legacy() -> None:
        conn = await asyncpg.connect(schema_url, timeout=5)
        try:
            await conn.execute(
                """
                CREATE TABLE agent_histories (
                    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
                    swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL, caller_id TEXT NOT NULL,
                    tool_format TEXT NOT NULL, task_id TEXT NOT NULL, agent_name TEXT NOT NULL,
                    history JSONB NOT NULL,
                    created_at TIMESTAMPTZ DEFAULT NOW(), updated_at TIMESTAMPTZ DEFAULT NOW());
                CREATE TABLE task_events (
                    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
                    task_id TEXT NOT NULL, swarm_name TEXT NOT NULL, caller_role TEXT NOT NULL,
                    caller_id TEXT NOT NULL, event_type TEXT, event_data TEXT, event_id TEXT,
                    created_at TIMESTAMPTZ DEFAULT NOW());
                INSERT INTO task_events (task_id, swarm_name, caller_role, caller_id, event_type)
                    VALUES ('t', 's', 'user', 'u', 'old');
                """
            )
            for n, stamp in (
                (1, datetime(2024, 1, 1, tzinfo=UTC)),
                (2, datetime(2024, 1, 2, tzinfo=UTC)),
            ):
                await conn.execute(
                    "INSERT INTO agent_histories (swarm_name, caller_role, caller_id, tool_format,"
                    " task_id, agent_name, history, created_at, updated_at)"
                    " VALUES ('s','user','u','completions','t','sup',$1::jsonb,$2::timestamptz,$2::timestamptz)",
                    json.dumps([{"role": "user", "content": f"turn {n}"}]),
                    stamp,
                )
        finally:
            await conn.close()

    asyncio.run(legacy())
    result = mail(["db-init"], tmp_path, schema_url)
    assert result.returncode == 0, result.stderr
    assert "Collapsed 1 duplicated agent history row(s)" in result.stdout
    assert "Setting up table agent_histories ... already present" in result.stdout

    async def check() -> None:
        conn = await asyncpg.connect(schema_url, timeout=5)
        try:
            rows = await conn.fetch("SELECT history FROM agent_histories")
            assert [json.loads(r["history"]) for r in rows] == [
                [{"role": "user", "content": "turn 2"}]
            ]
            assert await conn.fetchval("SELECT seq FROM task_events WHERE event_type = 'old'") == 1
        finally:
            await conn.close()

    asyncio.run(check())


def test_removes_pseudo_task_rows_of_older_versions(schema_url: str, tmp_path: Path) -> None:
    """Earlier versions stored the runtime's own events under task '*' (a running 'task')."""
    first = mail(["db-init"], tmp_path, schema_url)
    assert first.returncode == 0, first.stderr

    async def plant() -> None:
        conn = await asyncpg.connect(schema_url, timeout=5)
        try:
            for task_id in ("*", "real-task"):
                await conn.execute(
                    "INSERT INTO tasks (task_id, swarm_name, caller_role, caller_id, task_owner,"
                    " is_running, completed, start_time)"
                    " VALUES ($1, 's', 'user', 'u', 'user:u@s', true, false, now())",
                    task_id,
                )
                await conn.execute(
                    "INSERT INTO task_events (task_id, swarm_name, caller_role, caller_id,"
                    " event_type) VALUES ($1, 's', 'user', 'u', 'shutdown_requested')",
                    task_id,
                )
        finally:
            await conn.close()

    asyncio.run(plant())
    result = mail(["db-init"], tmp_path, schema_url)
    assert result.returncode == 0, result.stderr
    assert "Removed 1 pseudo-task row(s) (task_id '*')" in result.stdout

    async def check() -> None:
        conn = await asyncpg.connect(schema_url, timeout=5)
        try:
            assert [r["task_id"] for r in await conn.fetch("SELECT task_id FROM tasks")] == [
                "real-task"
            ]
            events = await conn.fetch("SELECT task_id FROM task_events")
            assert [r["task_id"] for r in events] == ["real-task"]
        finally:
            await conn.close()

    asyncio.run(check())
