"""docs/database.md: `mail db-init` is the step for a server whose database user may not
create tables. Run as the schema's owner, it makes every table the server uses; a real
`mail server` then starts as a user with only SELECT, INSERT, UPDATE and DELETE, and
answers a keyed message (the idempotency keys' table) and its repeat.

Before: db-init left out idempotency_keys and the team tables, and the server ran its
CREATE ... IF NOT EXISTS statements at every start, so it stopped with `permission denied
for schema` even when every table was there.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.pg_schema import (
    BASE_URL,
    TASK_TABLES,
    _execute,
    scratch_schema,
    with_search_path,
)

from server_fixtures import keyed_stub_server, server_env

pytestmark = pytest.mark.timeout(180)

EVERY_TABLE = (
    *TASK_TABLES,
    "idempotency_keys",
    "team_threads",
    "team_posts",
    "team_inbox",
    "team_attachments",
)


@pytest.fixture
def schema_and_role() -> Iterator[tuple[str, str]]:
    """A scratch schema and a login role that may use, but not create, its tables."""
    role = f"mail_rw_{uuid.uuid4().hex[:10]}"
    with scratch_schema("mail_restricted") as schema:
        _execute(
            BASE_URL,
            f"CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA {schema} TO {role};"
            f" ALTER DEFAULT PRIVILEGES IN SCHEMA {schema}"
            f" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};"
            f" ALTER DEFAULT PRIVILEGES IN SCHEMA {schema}"
            f" GRANT USAGE, SELECT ON SEQUENCES TO {role};",
        )
        try:
            yield schema, role
        finally:
            _execute(BASE_URL, f"DROP OWNED BY {role}")
    _execute(BASE_URL, f"DROP ROLE {role}")


def as_role(url: str, role: str) -> str:
    """The same database URL with another user name (trust auth: no password)."""
    scheme, rest = url.split("://", 1)
    host = rest.split("@", 1)[-1]
    return f"{scheme}://{role}@{host}"


def test_a_server_runs_on_tables_db_init_made_for_it(
    schema_and_role: tuple[str, str], tmp_path: Path
) -> None:
    schema, role = schema_and_role
    owner_url = with_search_path(BASE_URL, schema)
    init = subprocess.run(
        [sys.executable, "-m", "mail.cli", "db-init"],
        cwd=tmp_path,
        env=server_env({"DATABASE_URL": owner_url}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert init.returncode == 0, init.stderr
    for table in EVERY_TABLE:
        assert f"Setting up table {table} ... created" in init.stdout, init.stdout
        assert f"  {table}: OK" in init.stdout, init.stdout

    env = {"DATABASE_URL": as_role(owner_url, role)}
    with keyed_stub_server(tmp_path, {"alice": ("user", "alice")}, env=env) as server:
        headers = {
            "Authorization": f"Bearer {server.keys['alice']}",
            "Idempotency-Key": '"restricted-1"',
        }
        with httpx.Client(base_url=server.base_url, timeout=60) as http:
            first = http.post("/message", json={"body": "hello"}, headers=headers)
            assert first.status_code == 200, first.text
            again = http.post("/message", json={"body": "hello"}, headers=headers)
            assert again.status_code == 200, again.text
            assert again.headers.get("Idempotent-Replayed") == "true"
            assert again.json()["task_id"] == first.json()["task_id"]
        assert "may not change the schema" in server.logs()
