"""A caller refused at its store quota gets in again once an operator pruned its tasks.

On PostgreSQL `mail db-prune` runs beside a live server (a SQLite file in use is refused).
The server read a caller's books from the store once and kept them: after a prune removed
the caller's tasks (``GET /tasks`` showed none) the server still answered 429 "you keep 3
stored tasks ... an operator can remove them with `mail db-prune`" until it restarted. Now
a caller at a bound has its books read again from the store (at most every few seconds).
Real ``mail server`` on PostgreSQL in a scratch schema, the real ``mail db-prune``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from server_fixtures import (
    ROOT_ALICE_BOB,
    ServerProcess,
    auth,
    keyed_stub_server,
    post_as,
    server_env,
)
from support.pg_schema import BASE_URL, scratch_schema, with_search_path

pytestmark = pytest.mark.timeout(300)

MAX_TASKS = 3


def send(server: ServerProcess, who: str, body: str) -> httpx.Response:
    return post_as(server, who, {"body": body, "subject": "s"}, timeout=60)


def test_a_caller_at_its_quota_gets_in_after_a_live_prune(tmp_path: Path) -> None:
    with scratch_schema("live_prune") as schema:
        url = with_search_path(BASE_URL, schema)
        extra = f'\n[server.store]\nkind = "postgres"\nmax_stored_tasks_per_caller = {MAX_TASKS}\n'
        with keyed_stub_server(
            tmp_path, ROOT_ALICE_BOB, extra=extra, env={"DATABASE_URL": url}
        ) as server:
            for n in range(MAX_TASKS):
                assert send(server, "alice", f"task {n}").status_code == 200
            refused = send(server, "alice", "one too many")
            assert refused.status_code == 429, refused.text
            pruned = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mail.cli",
                    "db-prune",
                    "--database-url",
                    url,
                    "--older-than",
                    "0",
                ],
                capture_output=True,
                text=True,
                env=server_env(),
                cwd=tmp_path,
                timeout=120,
            )
            assert pruned.returncode == 0, pruned.stderr
            assert f"Removed {MAX_TASKS} task(s)" in pruned.stdout, pruned.stdout
            listed = httpx.get(f"{server.base_url}/tasks", headers=auth(server.keys["alice"]))
            assert listed.json() == {}
            deadline = time.monotonic() + 30  # the books are read again within seconds
            while (answer := send(server, "alice", "room again")).status_code == 429:
                assert time.monotonic() < deadline, answer.text
                time.sleep(0.5)
            assert answer.status_code == 200, answer.text
